#!/usr/bin/env python3
"""Serving benchmark: tachyon serve against llama.cpp (bench/llamacpp_server.py on
llama-cpp-python's continuous batching) on the same model, machine and thread count, driven by
the same load generator (bench/loadgen.py) one server after the other. Prints a markdown table
of aggregate output tokens/s, TTFT and ITL per concurrency level with the tachyon/llama.cpp
ratio, and tachyon's prefix-cache check (2,000-token prompt, first 1,900 cached vs cold).

    .venv/bin/python bench/compare_serving.py [--threads 2] [--clients 1,8,32,64]

Needs .venv-llamacpp (tools/make_llamacpp_reference.py sets it up) for the llama.cpp side.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache" / "tachyon")) / \
    "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become healthy")


def run_server_and_load(command: list[str], port: int, loadgen_args: list[str]) -> list[dict]:
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(url, server)
        results = []
        for args in loadgen_args:
            out = subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), "--url", url,
                                  "--json", *args.split()], capture_output=True, text=True,
                                 check=True)
            results.append(json.loads(out.stdout))
        return results
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--prompt-tokens-min", type=int, default=128)
    parser.add_argument("--prompt-tokens-max", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--skip-llamacpp", action="store_true")
    args = parser.parse_args()

    max_clients = max(int(c) for c in args.clients.split(","))
    load = (f"--clients {args.clients} --requests-per-client {args.requests_per_client} "
            f"--prompt-tokens-min {args.prompt_tokens_min} --prompt-tokens-max "
            f"{args.prompt_tokens_max} --output-tokens {args.output_tokens} --endpoint completions")
    port = free_port()
    tachyon = run_server_and_load(
        [args.tachyon, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(port),
         "--max-running", str(max_clients), "-c", "2048"],
        port, [load, "--prefix-cache-check --endpoint completions"])
    llamacpp = None
    if not args.skip_llamacpp:
        python = ROOT / ".venv-llamacpp" / "bin" / "python"
        port = free_port()
        llamacpp = run_server_and_load(
            [str(python), str(ROOT / "bench" / "llamacpp_server.py"), "-m", args.model, "-t",
             str(args.threads), "--port", str(port), "--slots", str(max_clients), "--ctx", "1024",
             "--kv-unified"],
            port, [load])[0]

    print(f"model {Path(args.model).name}, {args.threads} threads, prompts "
          f"{args.prompt_tokens_min}-{args.prompt_tokens_max} tokens, {args.output_tokens} output "
          f"tokens, {args.requests_per_client} requests per client\n")
    print("| clients | tachyon tok/s | llama.cpp tok/s | ratio | tachyon TTFT p50 ms | "
          "llama.cpp TTFT p50 ms | tachyon ITL p50 ms | llama.cpp ITL p50 ms | errors (t / l) |")
    print("|---|---|---|---|---|---|---|---|---|")
    ours = {row["clients"]: row for row in tachyon[0]["levels"]}
    theirs = {row["clients"]: row for row in llamacpp["levels"]} if llamacpp else {}
    for clients, row in ours.items():
        peer = theirs.get(clients)
        ratio = f"{row['output_tokens_per_s'] / peer['output_tokens_per_s']:.2f}x" if peer else "-"
        print(f"| {clients} | {row['output_tokens_per_s']:.1f} | "
              f"{peer['output_tokens_per_s']:.1f} | {ratio} | " if peer else
              f"| {clients} | {row['output_tokens_per_s']:.1f} | - | - | ", end="")
        print(f"{row['ttft_median_s'] * 1000:.0f} | "
              f"{(peer['ttft_median_s'] * 1000 if peer else float('nan')):.0f} | "
              f"{row['itl_median_s'] * 1000:.1f} | "
              f"{(peer['itl_median_s'] * 1000 if peer else float('nan')):.1f} | "
              f"{row['errors']} / {peer['errors'] if peer else '-'} |")
    prefix = tachyon[1]
    print(f"\nprefix cache (tachyon): 2,000-token prompt, TTFT cold {prefix['cold_ttft_median_s'] * 1000:.0f} ms,"
          f" first 1,900 tokens cached {prefix['warm_ttft_median_s'] * 1000:.0f} ms: warm = "
          f"{100 * prefix['warm_ttft_median_s'] / prefix['cold_ttft_median_s']:.1f}% of cold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
