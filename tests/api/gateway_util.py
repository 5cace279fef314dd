"""What the multi-tenant API tests (gateway_test, durability_test, fairness_test) share: the
`tachyon keys` / `tachyon usage` CLI on a database file, Authorization headers, the OpenAI error
shape, Go durations and per-key /metrics samples.

    keys = KeysCli("build/tachyon", "/tmp/x/tachyon.db")
    alice = keys.create("alice", rpm=30, tpm=0, concurrency=0)   # {"id", "name", "key", ...}
    keys.revoke("alice"); keys.update("alice", daily_tokens=100)
    keys.usage("--by", "key")                                     # list of dicts
"""
from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from server_fixture import http_get, parse_prometheus_samples

try:
    import httpx
except ImportError:  # the openai client in .venv ships its HTTP library as httpx2
    import httpx2 as httpx  # noqa: F401


class CliError(RuntimeError):
    pass


class KeysCli:
    """`tachyon keys ...` and `tachyon usage ...` with --db; JSON results, CliError on failure."""

    FLAGS = {"tier": "--tier", "rpm": "--rpm", "tpm": "--tpm", "concurrency": "--concurrency",
             "daily_tokens": "--daily-tokens", "monthly_tokens": "--monthly-tokens",
             "max_tokens": "--max-tokens", "models": "--models"}

    def __init__(self, tachyon: str, db: str):
        self.tachyon = str(tachyon)
        self.db = str(db)

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([self.tachyon, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def _json(self, *argv: str) -> Any:
        result = self.run(*argv)
        if result.returncode != 0:
            raise CliError(f"`tachyon {' '.join(argv)}` exited {result.returncode}: "
                           f"{result.stderr.strip()}")
        try:
            return json.loads(result.stdout)
        except ValueError as error:
            raise CliError(f"`tachyon {' '.join(argv)}` printed no JSON: {result.stdout!r}") \
                from error

    def _flags(self, limits: dict) -> list[str]:
        argv = []
        for name, value in limits.items():
            if name not in self.FLAGS:
                raise ValueError(f"unknown key option {name}")
            if isinstance(value, (list, tuple)):
                value = ",".join(value)
            argv += [self.FLAGS[name], str(value)]
        return argv

    def create(self, name: str, **limits) -> dict:
        """Options as keyword arguments: tier, rpm, tpm, concurrency, daily_tokens,
        monthly_tokens, max_tokens, models (a list or "a,b")."""
        return self._json("keys", "create", "--name", name, *self._flags(limits), "--db",
                          self.db, "--json")

    def update(self, name: str, **limits) -> subprocess.CompletedProcess:
        result = self.run("keys", "update", name, *self._flags(limits), "--db", self.db)
        if result.returncode != 0:
            raise CliError(f"keys update {name} exited {result.returncode}: {result.stderr}")
        return result

    def revoke(self, name: str) -> subprocess.CompletedProcess:
        result = self.run("keys", "revoke", name, "--db", self.db)
        if result.returncode != 0:
            raise CliError(f"keys revoke {name} exited {result.returncode}: {result.stderr}")
        return result

    def list(self) -> list:
        return self._json("keys", "list", "--db", self.db, "--json")

    def usage(self, *argv: str) -> list:
        return self._json("usage", "--db", self.db, "--json", *argv)


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def error_shape_problem(response) -> str | None:
    """None when the body is OpenAI's {"error": {"message", "type", "param", "code"}} with
    Content-Type application/json; otherwise what is wrong."""
    content_type = response.headers.get("content-type", "")
    if "application/json" not in content_type:
        return f"content-type {content_type!r}"
    try:
        body = response.json()
    except ValueError:
        return f"body is not JSON: {response.text[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return f"no error object: {response.text[:300]}"
    if not isinstance(error.get("message"), str) or not error["message"]:
        return f"no message: {error}"
    if not isinstance(error.get("type"), str):
        return f"no type: {error}"
    for field in ("param", "code"):
        if field not in error or not (error[field] is None or isinstance(error[field], str)):
            return f"{field} missing or not string/null: {error}"
    return None


def error_of(response) -> dict:
    """The inner error object ({} when there is none)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


def parse_go_duration(text: str | None) -> float | None:
    """Seconds of a Go time.Duration string ("0s", "150ms", "1.5s", "6m0s"); None if invalid."""
    if not text:
        return None
    if text == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _GO_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        position = match.end()
    return total if position == len(text) and position > 0 else None


def fetch_metrics_text(base_url: str, key: str | None) -> str:
    status, body = http_get(base_url.rstrip("/") + "/metrics", headers=bearer(key))
    if status != 200:
        raise RuntimeError(f"GET /metrics answered {status}: {body[:200]!r}")
    return body.decode()


def key_samples(text: str, key_name: str) -> list[tuple[str, dict, float]]:
    """The /metrics samples labelled with this key's name (label key, key_name or tenant)."""
    out = []
    for name, labels, value in parse_prometheus_samples(text):
        label = labels.get("key", labels.get("key_name", labels.get("tenant")))
        if label == key_name:
            out.append((name, labels, value))
    return out


def key_counter(text: str, key_name: str | None, metric: str, **labels: str) -> float | None:
    """Sum of the samples of `metric` labelled with this key's name (key_name None: every
    sample of it) whose labels include `labels`; None when there is no such sample at all."""
    found, total = False, 0.0
    samples = key_samples(text, key_name) if key_name is not None else \
        parse_prometheus_samples(text)
    for name, sample_labels, value in samples:
        if name == metric and all(sample_labels.get(k) == v for k, v in labels.items()):
            found = True
            total += value
    return total if found else None
