#!/usr/bin/env python3
"""What `tachyon router` costs and what cache-aware routing buys (issue 29).

1. Added time to first token: streamed 1-token completions, sent one at a time, alternately
   straight to a replica and through a router in front of it; p50/p99 of each and the
   difference (target: p99 added <= 2 ms).
2. Requests per second the router forwards: wrk (keep-alive) on GET /v1/models (the replica
   answers it without the engine), straight vs through the router, 1 and 64 connections.
3. Prefix-cache hit rate of conversations sharing system prompts: one server, two replicas
   behind the cache-aware router, two behind round-robin (the workload of tests/api/router_test).

Everything runs on this machine's cores (replica, router and load generator share them).

    .venv/bin/python bench/router_bench.py --tachyon build/tachyon [--requests 300]
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/api"))
from load_tools import run_wrk  # noqa: E402
from router_test import run_workload, hit_rate  # noqa: E402
from server_fixture import TachyonRouter, TachyonServer  # noqa: E402


def first_token_seconds(port: int, body: bytes) -> float:
    """Seconds from sending a streamed completion to its first data: event with a token."""
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" +
               body)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        sock.sendall(request)
        received = b""
        while b'"text":' not in received:
            piece = sock.recv(65536)
            if not piece:
                raise RuntimeError(f"connection closed before a token: {received[:300]!r}")
            received += piece
        elapsed = time.perf_counter() - start
        while sock.recv(65536):  # the rest, so the next request starts on a quiet server
            pass
    return elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def measure_ttft(replica: TachyonServer, router: TachyonRouter, model: str, count: int) -> dict:
    body = json.dumps({"model": model, "prompt": "The capital of France is", "max_tokens": 1,
                       "temperature": 0, "stream": True}).encode()
    for _ in range(10):  # warm both paths
        first_token_seconds(replica.port, body)
        first_token_seconds(router.port, body)
    direct, routed = [], []
    for _ in range(count):
        direct.append(first_token_seconds(replica.port, body))
        routed.append(first_token_seconds(router.port, body))
    out = {}
    for name, values in (("direct", direct), ("router", routed)):
        out[name] = {"p50_ms": 1e3 * statistics.median(values),
                     "p99_ms": 1e3 * percentile(values, 0.99)}
    out["added"] = {p: out["router"][p] - out["direct"][p] for p in ("p50_ms", "p99_ms")}
    return out


def measure_rps(replica: TachyonServer, router: TachyonRouter, seconds: int) -> list[dict]:
    rows = []
    for connections in (1, 64):
        row = {"connections": connections}
        for name, url in (("direct", replica.url), ("router", router.url)):
            result, _ = run_wrk(url + "/v1/models", connections, seconds)
            row[name] = result["rps"]
            row[name + "_errors"] = result["non2xx"] + result["socket_errors"]
        rows.append(row)
    return rows


def measure_hit_rates(tachyon: str, model_path: str | None, replica_args: list[str]) -> dict:
    rates = {}
    with TachyonServer(tachyon, model_path, replica_args) as single:
        run_workload(single.url, single.get_json("/v1/models")[1]["data"][0]["id"])
        rates["one server"] = hit_rate([single.url])
    for policy in ("cache-aware", "round-robin"):
        pair = [TachyonServer(tachyon, model_path, replica_args).start() for _ in range(2)]
        try:
            with TachyonRouter(tachyon, [r.url for r in pair], ["--routing", policy]) as router:
                model = router.health()["models"][0]["id"]
                run_workload(router.url, model)
            rates[policy] = hit_rate([r.url for r in pair])
        finally:
            for replica in pair:
                replica.stop()
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build/tachyon"))
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()

    replica_args = ["-t", str(args.threads), "-c", "2048", "--kv-cache-mem", "256MiB"]
    with TachyonServer(args.tachyon, args.model, replica_args) as replica:
        with TachyonRouter(args.tachyon, [replica.url]) as router:
            model = router.health()["models"][0]["id"]
            ttft = measure_ttft(replica, router, model, args.requests)
            print(f"time to first token over {args.requests} streamed 1-token completions:")
            for name in ("direct", "router", "added"):
                print(f"  {name:7s} p50 {ttft[name]['p50_ms']:7.3f} ms   "
                      f"p99 {ttft[name]['p99_ms']:7.3f} ms")
            rps = measure_rps(replica, router, args.seconds)
            print("GET /v1/models with wrk (keep-alive), requests per second:")
            for row in rps:
                print(f"  {row['connections']:3d} connection(s): direct {row['direct']:9.0f}   "
                      f"router {row['router']:9.0f}   ratio {row['router'] / row['direct']:.2f}   "
                      f"errors {row['direct_errors']} / {row['router_errors']}")
    rates = measure_hit_rates(args.tachyon, args.model, ["-t", "1", "-c", "2048",
                                                          "--kv-cache-mem", "192MiB"])
    print("prefix-cache hit rate (tokens): " +
          ", ".join(f"{name} {rate:.3f}" for name, rate in rates.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
