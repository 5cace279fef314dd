#!/usr/bin/env python3
"""HTTP benchmark (issue 22): requests per second of `tachyon serve` against llama.cpp's own
server (llama-server, built by bench/build_llama_server.sh) on the same model and machine, one
server after the other, with `wrk` (HTTP/1.1 keep-alive) and ApacheBench (`ab`: HTTP/1.0, a new
connection per request, each response read until the server closes), at 1 and 64 connections,
on GET /health and on 1-token completions (POST /v1/completions, max_tokens 1, temperature 0).
The servers take turns for --rounds rounds; each cell is the median of its rounds. Prints a
markdown table; failed requests are counted in it (connection errors, non-2xx answers,
requests that never completed; not ab's "Length" count, which only says bodies differ in size).

    .venv/bin/python bench/compare_http.py [--threads 2] [--seconds 5] [--ab-requests 2000]
        [--rounds 3]
        [--llama-server .peers/llama-server/build/bin/llama-server] [--model M.gguf]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "api"))
sys.path.insert(0, str(ROOT / "bench"))
from compare_serving import wait_healthy  # noqa: E402
from load_tools import run_ab, run_wrk, write_wrk_post_script  # noqa: E402
from server_fixture import free_port  # noqa: E402

DEFAULT_MODEL = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache" / "tachyon")) / \
    "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"


def measure(name: str, command: list[str], port: int, args, workdir: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        wait_healthy(url, server)
        with urllib.request.urlopen(url + "/v1/models", timeout=5) as response:
            model_id = json.load(response)["data"][0]["id"]
        body = json.dumps({"model": model_id, "prompt": PROMPT, "max_tokens": 1,
                           "temperature": 0})
        body_file = Path(workdir, f"{name}.json")
        body_file.write_text(body)
        lua_file = Path(workdir, f"{name}.lua")
        write_wrk_post_script(lua_file, body)
        for route, path, post in (("/health", "/health", False),
                                  ("1-token completion", "/v1/completions", True)):
            for connections in (1, 64):
                result, text = run_wrk(url + path, connections, args.seconds,
                                       str(lua_file) if post else None)
                rows.append({"server": name, "route": route, "client": "wrk (keep-alive)",
                             "connections": connections, "rps": result["rps"],
                             "errors": result["non2xx"] + result["socket_errors"]})
                print(f"{name} {route} wrk c={connections}: {result['rps']:.0f} req/s",
                      file=sys.stderr)
                requests = args.ab_requests if not post else max(64, args.ab_requests // 10)
                result, text = run_ab(url + path, requests, connections,
                                      str(body_file) if post else None)
                # Bodies of varying length are not errors (llama-server's carry timings).
                failed = int((result["failed"] or 0) - result["length_differences"] +
                             (result["non2xx"] or 0) + (requests - (result["complete"] or 0)))
                rows.append({"server": name, "route": route, "client": "ab (close)",
                             "connections": connections, "rps": result["rps"] or 0.0,
                             "errors": failed, "seconds": result["elapsed"]})
                print(f"{name} {route} ab c={connections}: {result['rps']} req/s in "
                      f"{result['elapsed']:.1f} s", file=sys.stderr)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--ab-requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--llama-server",
                        default=str(ROOT / ".peers/llama-server/build/bin/llama-server"))
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tachyon-compare-http-")
    have_peer = Path(args.llama_server).exists()
    if not have_peer:
        print(f"{args.llama_server} missing (bench/build_llama_server.sh builds it)",
              file=sys.stderr)
    # The servers take turns round by round, so that a machine's slow phases hit both.
    samples: list[dict] = []
    for _ in range(args.rounds):
        port = free_port()
        samples += measure("tachyon", [args.tachyon, "serve", "-m", args.model, "--port",
                                       str(port), "-t", str(args.threads), "-c", "2048"], port,
                           args, workdir)
        if have_peer:
            port = free_port()
            samples += measure("llama-server", [args.llama_server, "-m", args.model, "--port",
                                                str(port), "-t", str(args.threads), "-np", "64",
                                                "-c", "16384", "--no-webui"], port, args, workdir)
    # Each cell: the median of its rounds' requests/s, the errors of all rounds added up.
    cells: dict[tuple, dict] = {}
    for sample in samples:
        key = (sample["server"], sample["route"], sample["client"], sample["connections"])
        cell = cells.setdefault(key, {**sample, "all_rps": [], "errors": 0})
        cell["all_rps"].append(sample["rps"])
        cell["errors"] += sample["errors"]
    rows = []
    for cell in cells.values():
        cell["rps"] = statistics.median(cell["all_rps"])
        rows.append(cell)
    peers = {(r["route"], r["client"], r["connections"]): r for r in rows
             if r["server"] == "llama-server"}
    print("| route | client | connections | tachyon req/s | llama-server req/s | ratio | "
          "errors (t / l) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if row["server"] != "tachyon":
            continue
        peer = peers.get((row["route"], row["client"], row["connections"]))
        peer_rps = f"{peer['rps']:.0f}" if peer else "-"
        ratio = f"{row['rps'] / peer['rps']:.2f}x" if peer and peer["rps"] else "-"
        peer_errors = peer["errors"] if peer else "-"
        print(f"| {row['route']} | {row['client']} | {row['connections']} | {row['rps']:.0f} | "
              f"{peer_rps} | {ratio} | {row['errors']} / {peer_errors} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
