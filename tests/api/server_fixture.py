"""Start `tachyon serve` on a free loopback port for a test, and stop it cleanly afterwards.

    from server_fixture import TachyonServer
    with TachyonServer("build/tachyon", model=None, args=["-c", "2048"]) as server:
        server.url      # http://127.0.0.1:PORT
        server.v1       # http://127.0.0.1:PORT/v1 (the openai client's base_url)

Entering waits for `GET /health` to answer 200 (the model is loaded). Leaving sends SIGTERM and
waits for the process; an exit code other than 0 is a failure (ServerExitError, unless
check_exit=False; `returncode` holds it either way). The server's stderr goes to a temporary file;
it is printed when the server fails to start, exits badly, or the `with` body raises, and
`stderr_text()` returns it at any time.

`env` adds variables to the server's environment; `kill9()` ends it with SIGKILL (no cleanup,
for crash tests) and `restart()` starts it again with the same arguments on a new port (the same
one when `port` was given).

`TachyonRouter` is the same for `tachyon router --replica URL ...`; entering waits until every
replica is up behind it. Calls
that need an API key take `headers={"Authorization": "Bearer ..."}`.

Only the standard library is used here, so any script can import it.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


class ServerStartError(RuntimeError):
    pass


class ServerExitError(AssertionError):
    pass


def free_port() -> int:
    """A port that was free a moment ago (bind port 0 on loopback, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 5.0,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(status, body) of a GET; (0, b"") when nothing answers."""
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


class TachyonServer:
    def __init__(self, tachyon: str, model: str | None = None, args: list[str] | tuple = (),
                 startup_timeout: float = 120.0, stop_timeout: float = 60.0, check_exit: bool = True,
                 quiet: bool = False, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", port: int | None = None):
        self.tachyon = str(tachyon)
        self.model = model
        self.args = [str(a) for a in args]
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.check_exit = check_exit
        self.quiet = quiet
        self.env = dict(env or {})
        self.host = host  # what --host says; the tests always connect to 127.0.0.1
        self.process: subprocess.Popen | None = None
        self.fixed_port = port  # None: a free port at each start
        self.port = 0
        self.returncode: int | None = None
        self._log = None
        self._log_path: str | None = None
        self._previous_output = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def command(self) -> list[str]:
        argv = [self.tachyon, "serve", "--host", self.host, "--port", str(self.port)]
        if self.model:
            argv += ["-m", str(self.model)]
        return argv + self.args

    # -- lifetime ---------------------------------------------------------------------------
    def start(self) -> "TachyonServer":
        if self._log_path:
            try:
                os.unlink(self._log_path)
            except OSError:
                pass
        fd, self._log_path = tempfile.mkstemp(prefix="tachyon-serve-", suffix=".log")
        os.close(fd)
        for attempt in range(3):  # the free port can be taken between our probe and the bind
            self.port = self.fixed_port or free_port()
            self._log = open(self._log_path, "wb")
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                            stdout=self._log, stderr=subprocess.STDOUT,
                                            env={**os.environ, **self.env} if self.env else None)
            try:
                self._wait_healthy()
                return self
            except ServerStartError:
                exited = self.process.poll() is not None
                self._kill()
                text = self.stderr_text().lower()
                if exited and "in use" in text and attempt < 2:
                    continue
                self.dump_stderr("server did not start")
                raise
        raise AssertionError("unreachable")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"`{' '.join(self.command())}` exited with "
                                       f"{self.process.returncode} before /health answered 200")
            status, body = http_get(self.url + "/health", timeout=2.0)
            last = (status, body[:200])
            if status == 200:
                return
            time.sleep(0.2)
        raise ServerStartError(f"/health did not answer 200 within {self.startup_timeout:.0f} s "
                               f"(last: {last})")

    def stop(self) -> int:
        """SIGTERM, wait for the exit; returns the exit code (-9 if it had to be killed)."""
        if self.process is None:
            return self.returncode if self.returncode is not None else 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                self.returncode = -9
        if self.returncode is None:
            self.returncode = self.process.returncode
        self.process = None
        if self._log:
            self._log.close()
            self._log = None
        return self.returncode

    def kill9(self) -> int:
        """SIGKILL now (a crash: no drain, no cleanup); returns -9. The log is kept."""
        if self.process is not None:
            self._kill()
            self.returncode = self.process.returncode
            self.process = None
        if self._log:
            self._log.close()
            self._log = None
        return self.returncode if self.returncode is not None else -9

    def restart(self) -> "TachyonServer":
        """Starts the stopped (or killed) server again with the same arguments (on a new port);
        stderr_text() keeps the earlier runs' output above a '---- restart ----' line."""
        if self.process is not None:
            raise RuntimeError("restart() needs a stopped server")
        self._previous_output = self.stderr_text() + "---- restart ----\n"
        self.returncode = None
        return self.start()

    def _kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> "TachyonServer":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        code = self.stop()
        if exc_type is not None:
            self.dump_stderr(f"test raised {exc_type.__name__}")
        elif code != 0:
            self.dump_stderr(f"server exit code {code} after SIGTERM")
            if self.check_exit:
                raise ServerExitError(f"tachyon serve exited with {code} after SIGTERM, expected 0")

    def __del__(self):
        try:
            if self._log_path:
                os.unlink(self._log_path)
        except OSError:
            pass

    # -- helpers ----------------------------------------------------------------------------
    def stderr_text(self) -> str:
        if self._log:
            self._log.flush()
        try:
            text = Path(self._log_path).read_text(errors="replace") if self._log_path else ""
        except OSError:
            text = ""
        return self._previous_output + text

    def dump_stderr(self, why: str, last_lines: int = 80) -> None:
        if self.quiet:
            return
        lines = self.stderr_text().splitlines()
        print(f"---- tachyon serve output ({why}; last {min(len(lines), last_lines)} of "
              f"{len(lines)} lines) ----", file=sys.stderr)
        for line in lines[-last_lines:]:
            print(line, file=sys.stderr)
        print("---- end of server output ----", file=sys.stderr)
        sys.stderr.flush()

    def get_json(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, object]:
        status, body = http_get(self.url + path, headers=headers)
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, body


def metrics(base_url: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    """GET /metrics as {name: value}, values summed over label sets. Histograms give
    name_bucket/name_sum/name_count entries."""
    status, body = http_get(base_url.rstrip("/") + "/metrics", headers=headers)
    if status != 200:
        raise RuntimeError(f"GET /metrics answered {status}")
    return parse_prometheus(body.decode())


def parse_prometheus(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "}" in line:
            name = line[:line.index("{")]
            rest = line[line.rindex("}") + 1:].split()
        else:
            name, *rest = line.split()
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        values[name] = values.get(name, 0.0) + value
    return values


def parse_prometheus_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as (name, {label: value}, value), label sets kept apart."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels: dict[str, str] = {}
        if "{" in line and "}" in line:
            name = line[:line.index("{")]
            inner = line[line.index("{") + 1:line.rindex("}")]
            rest = line[line.rindex("}") + 1:].split()
            position = 0
            while position < len(inner):
                equals = inner.find("=", position)
                if equals < 0 or equals + 1 >= len(inner) or inner[equals + 1] != '"':
                    break
                label = inner[position:equals].strip().lstrip(",").strip()
                value, i = [], equals + 2
                while i < len(inner) and inner[i] != '"':
                    if inner[i] == "\\" and i + 1 < len(inner):
                        i += 1
                        value.append({"n": "\n"}.get(inner[i], inner[i]))
                    else:
                        value.append(inner[i])
                    i += 1
                labels[label] = "".join(value)
                position = i + 1
        else:
            name, *rest = line.split()
        if not rest:
            continue
        try:
            samples.append((name, labels, float(rest[0])))
        except ValueError:
            continue
    return samples


class TachyonRouter(TachyonServer):
    """`tachyon router` over `replicas` (their URLs); `args` adds router flags."""

    def __init__(self, tachyon: str, replicas: list[str], args: list[str] | tuple = (), **kwargs):
        super().__init__(tachyon, None, args, **kwargs)
        self.replicas = list(replicas)

    def command(self) -> list[str]:
        argv = [self.tachyon, "router", "--host", self.host, "--port", str(self.port)]
        for url in self.replicas:
            argv += ["--replica", url]
        return argv + self.args

    def start(self) -> "TachyonRouter":
        super().start()
        self.wait_replicas_up(len(self.replicas))
        return self

    def health(self) -> dict:
        status, body = http_get(self.url + "/health", timeout=2.0)
        try:
            return json.loads(body) if body else {}
        except ValueError:
            return {}

    def wait_replicas_up(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health().get("replicas_up") == count:
                return
            time.sleep(0.1)
        raise ServerStartError(f"the router did not see {count} replica(s) up within "
                               f"{timeout:.0f} s (last /health: {self.health()})")
