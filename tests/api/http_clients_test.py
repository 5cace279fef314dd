#!/usr/bin/env python3
"""`tachyon serve` under real load generators (issue 22): ApacheBench (`ab`: HTTP/1.0, a new
connection per request, reads each response until the server closes) and `wrk` (HTTP/1.1
keep-alive), on /health and on 1-token completions; then 100,000 short connections, with the
server's open descriptors and resident memory measured before and after.

    .venv/bin/python tests/api/http_clients_test.py --tachyon build/tachyon [--model M.gguf]
        [--churn 100000]

Every run must have zero failed requests. The server's idle timeout is set to 60 s here, so a
server that kept `close` connections open would make each ab request take a minute.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from load_tools import run_ab, run_wrk, write_wrk_post_script  # noqa: E402
from server_fixture import TachyonServer  # noqa: E402

CTX = 2048
COMPLETION = {"prompt": "The capital of France is", "max_tokens": 1,
              "temperature": 0}


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def resident_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def settle_descriptors(pid: int, baseline: int, seconds: float = 5.0) -> int:
    """Open descriptors once lingering closes are done (waits up to `seconds` for baseline)."""
    deadline = time.monotonic() + seconds
    count = open_descriptors(pid)
    while count > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
        count = open_descriptors(pid)
    return count


def ab_ok(result: dict, requests: int) -> bool:
    return (result["exit"] == 0 and result["complete"] == requests and result["failed"] == 0 and
            result["non2xx"] == 0)


def test_ab(server: TachyonServer, body_file: str) -> None:
    result, text = run_ab(server.url + "/health", 2000, 1)
    check(f"ab /health, 2000 requests, 1 connection: none failed ({result['rps']} req/s, "
          f"{result['elapsed']:.1f} s)", ab_ok(result, 2000) and result["elapsed"] < 60, text[-800:])
    result, text = run_ab(server.url + "/health", 5000, 64)
    check(f"ab /health, 5000 requests, 64 connections: none failed ({result['rps']} req/s)",
          ab_ok(result, 5000) and result["elapsed"] < 60, text[-800:])
    result, text = run_ab(server.url + "/v1/completions", 100, 1, body_file)
    check(f"ab 1-token completions, 100 requests, 1 connection: none failed, no waits "
          f"({result['rps']} req/s, {result['elapsed']:.1f} s)",
          ab_ok(result, 100) and result["elapsed"] < 30, text[-800:])
    result, text = run_ab(server.url + "/v1/completions", 256, 64, body_file)
    check(f"ab 1-token completions, 256 requests, 64 connections: none failed "
          f"({result['rps']} req/s, {result['elapsed']:.1f} s)",
          ab_ok(result, 256) and result["elapsed"] < 60, text[-800:])


def test_wrk(server: TachyonServer, lua_file: str) -> None:
    for connections in (1, 64):
        result, text = run_wrk(server.url + "/health", connections, 3)
        check(f"wrk /health, {connections} keep-alive connection(s), 3 s: no errors "
              f"({result['rps']:.0f} req/s)",
              result["exit"] == 0 and result["requests"] > 0 and result["non2xx"] == 0 and
              result["socket_errors"] == 0, text[-800:])
        result, text = run_wrk(server.url + "/v1/completions", connections, 3, lua_file)
        check(f"wrk 1-token completions, {connections} keep-alive connection(s), 3 s: no errors "
              f"({result['rps']:.0f} req/s)",
              result["exit"] == 0 and result["requests"] > 0 and result["non2xx"] == 0 and
              result["socket_errors"] == 0, text[-800:])


def test_churn(server: TachyonServer, count: int) -> None:
    pid = server.process.pid
    # Warm up (first allocations, thread arenas), then take the baseline.
    run_ab(server.url + "/health", 5000, 16)
    time.sleep(0.5)
    fds_before = settle_descriptors(pid, 0, seconds=0)
    rss_before = resident_kib(pid)
    result, text = run_ab(server.url + "/health", count, 16, timeout=600)
    check(f"ab: {count} short connections to /health, none failed ({result['rps']} req/s, "
          f"{result['elapsed']:.1f} s)", ab_ok(result, count), text[-800:])
    fds_after = settle_descriptors(pid, fds_before)
    rss_after = resident_kib(pid)
    info(f"open descriptors {fds_before} -> {fds_after}; resident {rss_before} -> {rss_after} KiB")
    check("open descriptors back to the baseline after the churn", fds_after <= fds_before,
          f"{fds_before} -> {fds_after}")
    # 8 MiB: the allocator's arenas alone moved RSS by +4.4 and +4.9 MiB in 2026-12-02's runs
    # (no leak: the descriptors were back); a leak of 84 bytes per connection would still show.
    check("resident memory within 8 MiB of the baseline after the churn",
          rss_after - rss_before <= 8192, f"{rss_before} -> {rss_after} KiB")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--model")
    parser.add_argument("--churn", type=int, default=100000)
    args = parser.parse_args()
    missing = [tool for tool in ("ab", "wrk") if shutil.which(tool) is None]
    if missing:
        check("ab and wrk are installed (scripts/setup.sh installs apache2-utils and wrk)", False,
              f"missing: {missing}")
        return exit_status()
    workdir = tempfile.mkdtemp(prefix="tachyon-http-clients-")
    server = TachyonServer(args.tachyon, args.model,
                           args=["-c", str(CTX), "--idle-timeout", "60"])
    with server:
        completion = {**COMPLETION, "model": server.get_json("/v1/models")[1]["data"][0]["id"]}
        body_file = os.path.join(workdir, "completion.json")
        Path(body_file).write_text(json.dumps(completion))
        lua_file = os.path.join(workdir, "completion.lua")
        write_wrk_post_script(lua_file, json.dumps(completion))
        section("ab", test_ab, server, body_file)
        section("wrk", test_wrk, server, lua_file)
        section("churn", test_churn, server, args.churn)
    shutil.rmtree(workdir, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
