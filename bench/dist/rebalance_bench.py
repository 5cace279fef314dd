#!/usr/bin/env python3
"""What `POST /admin/experts/rebalance` does to a running expert-parallel job (issue 28).

Starts `mpirun -np TP tachyon serve --tp TP` on a MoE model, sends rounds of concurrent greedy
completions (the first rounds measure the expert load), asks for a rebalance, and reports: the
ranks' share imbalance before and after (by the measured load), how long the rebalance took, each
rank's anonymous resident memory (RssAnon) before and after, the batched decode rate of a timed
round before and after, and whether every completion's tokens stayed the same.

    .venv/bin/python bench/dist/rebalance_bench.py --tachyon build/tachyon -m MODEL.gguf \\
        [--tp 2] [--replicas 2] [--requests 16] [--tokens 32]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/dist"))
from parallel_test import MpiServer, post_json  # noqa: E402

ADMIN = "sk-admin-rebalance-bench"


def rss_anon_mib(pids: dict[int, int]) -> dict[int, float]:
    """World rank -> RssAnon in MiB."""
    out = {}
    for rank, pid in sorted(pids.items()):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                out[rank] = int(line.split()[1]) / 1024
    return out


def round_of_completions(server: MpiServer, prompts: list[str], tokens: int) -> tuple[list, float]:
    """(each prompt's tokens, generated tokens per second over the round)."""
    import openai
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)

    def one(prompt: str) -> list[str]:
        reply = client.completions.create(model="m", prompt=prompt, temperature=0,
                                          max_tokens=tokens, logprobs=1,
                                          extra_body={"ignore_eos": True})
        return reply.choices[0].logprobs.tokens

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        outputs = list(pool.map(one, prompts))
    elapsed = time.monotonic() - start
    return outputs, sum(len(o) for o in outputs) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build/tachyon"))
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--warmup-rounds", type=int, default=2)
    args = parser.parse_args()
    prompts = [f"Story {i}: once upon a time in a city of {7 * i + 3} bridges," for i in
               range(args.requests)]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    server_args = ["-t", "1", "--model-alias", "m", "--admin-key", ADMIN]
    with MpiServer(args.tachyon, args.model, args.tp, 1, server_args,
                   startup_timeout=900) as server:
        for _ in range(args.warmup_rounds):  # the load the placement is made from
            round_of_completions(server, prompts, args.tokens)
        before, rate_before = round_of_completions(server, prompts, args.tokens)
        memory_before = rss_anon_mib(server.rank_pids())
        start = time.monotonic()
        status, done = post_json(server.url + "/admin/experts/rebalance",
                                 {"replicas": args.replicas}, admin, timeout=1800)
        wall = time.monotonic() - start
        if status != 200:
            print(f"rebalance answered {status}: {done}", file=sys.stderr)
            return 1
        memory_after = rss_anon_mib(server.rank_pids())
        after, rate_after = round_of_completions(server, prompts, args.tokens)
    result = {"model": Path(args.model).name, "tp": args.tp, "requests": args.requests,
              "tokens": args.tokens, "rebalance": done, "rebalance_wall_s": round(wall, 3),
              "rss_anon_mib_before": memory_before, "rss_anon_mib_after": memory_after,
              "batched_tokens_per_s_before": round(rate_before, 2),
              "batched_tokens_per_s_after": round(rate_after, 2),
              "same_tokens": before == after}
    print(json.dumps(result, indent=1))
    return 0 if before == after else 1


if __name__ == "__main__":
    sys.exit(main())
