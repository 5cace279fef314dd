"""ApacheBench (`ab`) and `wrk` runs with their summaries parsed, for the HTTP tests and
bench/compare_http.py. `ab` speaks HTTP/1.0 with a new connection per request and reads each
response until the server closes; `wrk` keeps its connections alive.

    result, text = run_ab("http://127.0.0.1:8080/health", requests=1000, concurrency=8)
    result["failed"], result["rps"], result["elapsed"]
    result, text = run_wrk("http://127.0.0.1:8080/health", connections=64, seconds=3)
    write_wrk_post_script("post.lua", json_body)   # then run_wrk(url, ..., script="post.lua")
"""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path


def run_ab(url: str, requests: int, concurrency: int, body_file: str | None = None,
           timeout: float = 300) -> tuple[dict, str]:
    argv = ["ab", "-q", "-n", str(requests), "-c", str(concurrency), "-s", "30", "-r"]
    if body_file:
        argv += ["-p", body_file, "-T", "application/json"]
    argv.append(url)
    started = time.monotonic()
    process = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    elapsed = time.monotonic() - started
    text = process.stdout + process.stderr
    result = {"exit": process.returncode, "elapsed": elapsed}
    # ab counts a response whose length differs from the first one's as failed ("Length"):
    # a server whose bodies vary (timings, ids) gets those without any error.
    match = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)",
                      text)
    result["length_differences"] = int(match.group(3)) if match else 0
    for key, pattern in {"complete": r"Complete requests:\s+(\d+)",
                         "failed": r"Failed requests:\s+(\d+)",
                         "non2xx": r"Non-2xx responses:\s+(\d+)",
                         "rps": r"Requests per second:\s+([\d.]+)"}.items():
        match = re.search(pattern, text)
        result[key] = float(match.group(1)) if match else (0 if key == "non2xx" else None)
    return result, text


def run_wrk(url: str, connections: int, seconds: int, script: str | None = None) -> tuple[dict, str]:
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "30s"]
    if script:
        argv += ["-s", script]
    argv.append(url)
    process = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    text = process.stdout + process.stderr
    result = {"exit": process.returncode}
    match = re.search(r"(\d+) requests in", text)
    result["requests"] = int(match.group(1)) if match else 0
    match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    result["non2xx"] = int(match.group(1)) if match else 0
    match = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    result["socket_errors"] = sum(int(g) for g in match.groups()) if match else 0
    match = re.search(r"Requests/sec:\s+([\d.]+)", text)
    result["rps"] = float(match.group(1)) if match else 0.0
    return result, text


def write_wrk_post_script(path: str | Path, json_body: str) -> None:
    """A wrk Lua script that POSTs `json_body` (a JSON text without single quotes)."""
    Path(path).write_text(f'wrk.method = "POST"\nwrk.body = \'{json_body}\'\n'
                          'wrk.headers["Content-Type"] = "application/json"\n')
