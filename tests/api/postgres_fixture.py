"""A private PostgreSQL cluster for a test: initdb in a temporary folder, the server on a free
loopback port (trust authentication), stopped and removed afterwards. As root (CI), the
cluster runs as the `postgres` user that Debian's package creates (PostgreSQL refuses root).

    with PostgresServer() as pg:
        pg.url          # postgresql://postgres@127.0.0.1:PORT/postgres
        pg.restart()    # an immediate stop (as a crash: no shutdown checkpoint) and a start
        pg.query("SELECT count(*) FROM usage")   # rows as lists of strings (psql)
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time

from server_fixture import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (make setup installs it)")
    return found[-1]


class PostgresServer:
    def __init__(self):
        self.port = 0
        self.root = ""
        self.data = ""

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def start(self) -> "PostgresServer":
        self.root = tempfile.mkdtemp(prefix="tachyon-pg-")
        self.data = os.path.join(self.root, "data")
        os.makedirs(self.data)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.data, "postgres", "postgres")
            os.chmod(self.root, 0o755)
        subprocess.run(self._as_owner([_bin("initdb"), "-D", self.data, "-U", "postgres",
                                       "--auth=trust", "-E", "UTF8", "--no-sync"]),
                       check=True, capture_output=True)
        self.port = free_port()
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        argv = [_bin("pg_ctl"), "-D", self.data, "-w", "-t", "60", "-l",
                os.path.join(self.data, "server.log")]
        if action in ("start", "restart"):
            argv += ["-o", options]
        subprocess.run(self._as_owner(argv + [*extra, action]), check=True, capture_output=True)
        if action in ("start", "restart"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                ready = subprocess.run([_bin("pg_isready"), "-h", "127.0.0.1", "-p",
                                        str(self.port)], capture_output=True)
                if ready.returncode == 0:
                    return
                time.sleep(0.1)
            raise RuntimeError("PostgreSQL did not come up")

    def stop(self, mode: str = "fast") -> None:
        if self.data and os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._pg_ctl("stop", "-m", mode)

    def restart(self) -> None:
        """Stops at once (mode immediate: no checkpoint, as after a crash) and starts again."""
        self.stop("immediate")
        self._pg_ctl("start")

    def query(self, sql: str) -> list[list[str]]:
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                              "-d", "postgres", "-At", "-F", "\t", "-c", sql],
                             check=True, capture_output=True, text=True).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
