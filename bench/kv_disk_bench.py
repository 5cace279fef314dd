#!/usr/bin/env python3
"""Time to first token of a long prompt through `tachyon serve`: computed (no disk tier),
computed while the disk tier writes its blocks (the tier's cost), and read back from disk by a
restarted server (the tier's gain). Each is the median of --runs requests; prompts are
tinyshakespeare slices (token ids), a different cache_salt per cold run so nothing is shared.

    .venv/bin/python bench/kv_disk_bench.py --tachyon build/tachyon [--tokens 2000] [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "api"))
from kv_disk_test import corpus_prompt  # noqa: E402
from server_fixture import TachyonServer  # noqa: E402


def ttft(server: TachyonServer, prompt: list[int], salt: str) -> tuple[float, int]:
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    start = time.monotonic()
    answer = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0,
                                       extra_body={"cache_salt": salt})
    details = answer.usage.prompt_tokens_details
    return time.monotonic() - start, details.cached_tokens if details else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    prompt = corpus_prompt(args.tachyon, 0, args.tokens)
    base = ["--kv-cache-mem", "1GiB"]
    rows = []
    with TachyonServer(args.tachyon, args=base) as server:
        times = [ttft(server, prompt, f"off{i}")[0] for i in range(args.runs)]
        rows.append(("computed, no disk tier", times, 0))
    with tempfile.TemporaryDirectory(prefix="tachyon-kv-disk-bench-") as directory:
        server = TachyonServer(args.tachyon, args=[*base, "--kv-disk", directory]).start()
        times = [ttft(server, prompt, f"on{i}")[0] for i in range(args.runs)]
        rows.append(("computed, disk tier writing", times, 0))
        server.stop()
        times, cached = [], 0
        for i in range(args.runs):  # each run a fresh process: nothing in RAM
            server.restart()
            seconds, cached = ttft(server, prompt, f"on{i}")
            times.append(seconds)
            server.stop()
        rows.append(("after a restart, from disk", times, cached))
    print(f"prompt {len(prompt)} tokens, median of {args.runs} runs")
    print("| case | TTFT ms (median) | min | max | cached tokens |")
    print("|---|---:|---:|---:|---:|")
    for name, times, cached in rows:
        print(f"| {name} | {statistics.median(times) * 1000:.0f} | {min(times) * 1000:.0f} | "
              f"{max(times) * 1000:.0f} | {cached} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
