#!/usr/bin/env python3
"""API key limits shared by replicas through a real redis-server (issue 29).

Two `tachyon serve --auth db --redis URL` replicas share one key database and one Redis,
behind a `tachyon router`:
1. A key with rpm=30 gets 30 requests (plus what refills during the burst: 0.5/s) across both
   replicas together, not 30 on each; x-ratelimit-remaining-requests counts the shared bucket.
2. A key with concurrency=2 gets 2 streams in flight across both replicas; the rest get 429.
3. A daily token quota is exact across replicas: once the ledger holds the quota's tokens, both
   replicas refuse with insufficient_quota, and they overshot it by less than one request.
4. Redis stopped under load: requests with keys get 503 rate_limiter_unavailable (fail closed),
   never a crash or a hang; a replica with --redis-fail-open keeps answering; Redis started
   again: requests succeed within a second.

    .venv/bin/python tests/api/shared_limits_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai client in .venv ships its HTTP library as httpx2
    import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from gateway_util import KeysCli, bearer, error_of  # noqa: E402
from server_fixture import TachyonRouter, TachyonServer, free_port  # noqa: E402

REPLICA_ARGS = ["-t", "1", "-c", "2048", "--kv-cache-mem", "128MiB"]


class RedisServer:
    """redis-server on a loopback port, in memory only."""

    def __init__(self, port: int):
        self.port = port
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> "RedisServer":
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


def completion(base: str, key: str, model: str, max_tokens: int = 1, **extra) -> httpx.Response:
    return httpx.post(base + "/v1/completions", headers=bearer(key), timeout=120,
                      json={"model": model, "prompt": "Hello", "max_tokens": max_tokens,
                            "temperature": 0, **extra})


def test_rpm_shared(router: TachyonRouter, replicas: list[TachyonServer], keys: KeysCli,
                    model: str) -> None:
    key = keys.create("rpm30", rpm=30, tpm=0, concurrency=0)["key"]
    statuses: list[int] = []
    lock = threading.Lock()

    def worker(count: int) -> None:
        for _ in range(count):
            status = completion(router.url, key, model).status_code
            with lock:
                statuses.append(status)
    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(10,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    admitted = statuses.count(200)
    refill = int(elapsed * 30 / 60) + 1
    info(f"rpm=30: {admitted} of 40 admitted in {elapsed:.1f} s across 2 replicas")
    check("rpm=30 admits 30 requests (plus the burst's refill) across both replicas together",
          30 <= admitted <= 30 + refill and statuses.count(429) == 40 - admitted,
          (admitted, statuses.count(429), elapsed))
    # The shared bucket: what one replica took shows in the other's headers.
    other = keys.create("rpm100", rpm=100, tpm=0, concurrency=0)["key"]
    for _ in range(5):
        completion(replicas[0].url, other, model)
    remaining = completion(replicas[1].url, other, model).headers.get(
        "x-ratelimit-remaining-requests")
    check("x-ratelimit-remaining-requests on one replica counts the other's requests",
          remaining is not None and 93 <= int(remaining) <= 95, remaining)


def test_concurrency_shared(replicas: list[TachyonServer], keys: KeysCli, model: str) -> None:
    key = keys.create("conc2", rpm=0, tpm=0, concurrency=2)["key"]
    results: list[int] = []
    lock = threading.Lock()
    started = threading.Barrier(4)

    def stream(url: str) -> None:
        started.wait()
        with httpx.Client(timeout=120) as client:
            with client.stream("POST", url + "/v1/completions", headers=bearer(key), json={
                    "model": model, "prompt": "Once upon a time", "max_tokens": 60,
                    "ignore_eos": True, "stream": True}) as response:
                for _ in response.iter_lines():
                    pass
                with lock:
                    results.append(response.status_code)
    threads = [threading.Thread(target=stream, args=(replicas[i % 2].url,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check("concurrency=2 lets 2 streams in across both replicas, the rest get 429",
          sorted(results) == [200, 200, 429, 429], results)


def test_quota_shared(replicas: list[TachyonServer], keys: KeysCli, model: str,
                      db_path: str) -> None:
    quota = 300
    created = keys.create("quota300", rpm=0, tpm=0, concurrency=0, daily_tokens=quota)
    key, key_id = created["key"], created["id"]
    statuses = []
    for i in range(40):
        response = completion(replicas[i % 2].url, key, model, max_tokens=20, ignore_eos=True)
        statuses.append(response.status_code)
        if response.status_code != 200:
            break
    with sqlite3.connect(db_path) as db:
        used, largest = db.execute(
            "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0), "
            "COALESCE(MAX(prompt_tokens + completion_tokens), 0) FROM usage "
            "WHERE key_id = ? AND status = 'ok'", (key_id,)).fetchone()
    info(f"daily quota {quota}: {statuses.count(200)} requests, {used} tokens in the ledger")
    refusals = [completion(r.url, key, model) for r in replicas]
    check("the daily quota is refused on both replicas once spent",
          all(r.status_code == 429 and error_of(r).get("code") == "insufficient_quota"
              for r in refusals), [(r.status_code, r.text[:120]) for r in refusals])
    check("the quota was spent exactly across replicas (overshoot below one request)",
          quota <= used < quota + largest, (used, largest))


def test_redis_outage(redis: RedisServer, replicas: list[TachyonServer], fail_open: TachyonServer,
                      keys: KeysCli, model: str) -> None:
    key = keys.create("outage", rpm=1000, tpm=0, concurrency=0)["key"]
    check("requests succeed with Redis up",
          [completion(r.url, key, model).status_code for r in replicas] == [200, 200])
    redis.stop()
    down = [completion(r.url, key, model) for r in replicas for _ in range(3)]
    check("with Redis down every keyed request gets 503 rate_limiter_unavailable (fail closed)",
          all(r.status_code == 503 and error_of(r).get("code") == "rate_limiter_unavailable" and
              r.headers.get("retry-after") == "1" for r in down),
          [(r.status_code, r.text[:100]) for r in down])
    check("a replica with --redis-fail-open keeps answering under its own limits",
          completion(fail_open.url, key, model).status_code == 200)
    check("/health stays 200 (the engine is fine)",
          all(httpx.get(r.url + "/health").status_code == 200 for r in replicas))
    redis.start()
    restarted = time.monotonic()
    recovered = None
    while time.monotonic() - restarted < 5:
        statuses = [completion(r.url, key, model).status_code for r in replicas]
        if statuses == [200, 200]:
            recovered = time.monotonic() - restarted
            break
        time.sleep(0.05)
    check("Redis started again: both replicas admit again within a second",
          recovered is not None and recovered < 1.0, recovered)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tachyon-shared-") as temp:
        db_path = os.path.join(temp, "tachyon.db")
        keys = KeysCli(args.tachyon, db_path)
        keys.create("bootstrap", rpm=0, tpm=0, concurrency=0)
        redis = RedisServer(free_port()).start()
        shared = ["--auth", "db", "--db", db_path, "--redis", redis.url]
        replicas = [TachyonServer(args.tachyon, args.model, REPLICA_ARGS + shared)
                    for _ in range(2)]
        fail_open = TachyonServer(args.tachyon, args.model,
                                  REPLICA_ARGS + shared + ["--redis-fail-open"])
        try:
            for server in replicas + [fail_open]:
                server.start()
            model = replicas[0].get_json("/health")[1]["models"][0]["id"]
            with TachyonRouter(args.tachyon, [r.url for r in replicas]) as router:
                section("rpm shared", test_rpm_shared, router, replicas, keys, model)
            section("concurrency shared", test_concurrency_shared, replicas, keys, model)
            section("quota shared", test_quota_shared, replicas, keys, model, db_path)
            section("Redis outage", test_redis_outage, redis, replicas, fail_open, keys, model)
        finally:
            for server in replicas + [fail_open]:
                server.stop()
            redis.stop()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
