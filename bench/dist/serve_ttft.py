#!/usr/bin/env python3
"""Time to first token through `tachyon serve` in one process and over 2 ranks (issue 28).

Starts the server in each layout (one process with 2 threads; `mpirun -np 2 ... --tp 2` and
`--pp 2` with one thread per rank), sends prompts of exactly `--prompt-tokens` tokens (distinct
passages of the corpus, so no prefix is reused) one at a time to /v1/completions as token ids,
streamed, `max_tokens` 1, and reports the median time from sending a request to its first
streamed token. `bench/scale_model.py validate` compares it with the scale model's prediction.

    .venv/bin/python bench/dist/serve_ttft.py [--tachyon build/tachyon] [-m MODEL] \\
        [--prompt-tokens 512] [--requests 8] [--json OUT] [--four-ranks]

`--four-ranks` adds `mpirun -np 4 ... --tp 2 --pp 2`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/dist"))
from parallel_test import CORPUS, MpiServer, post_json  # noqa: E402
from server_fixture import TachyonServer  # noqa: E402


def prompts_of(server: TachyonServer, count: int, tokens: int) -> list[list[int]]:
    """`count` token-id prompts of `tokens` tokens each, from consecutive corpus passages."""
    text = (CORPUS / "tinyshakespeare.txt").read_text()
    status, reply = post_json(server.url + "/tokenize",
                              {"content": text[:tokens * 8 * (count + 1)]}, {})
    if status != 200:
        raise SystemExit(f"/tokenize answered {status}: {reply}")
    ids = reply["tokens"]
    if len(ids) < tokens * (count + 1):
        raise SystemExit("the corpus passage is too short for these prompts")
    return [ids[i * tokens:(i + 1) * tokens] for i in range(count + 1)]


def time_to_first_token(server: TachyonServer, prompt: list[int]) -> float:
    """Seconds from sending a streamed completion to its first data event with a token."""
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0,
                       "stream": True}).encode()
    request = urllib.request.Request(server.v1 + "/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                if event.get("choices") and event["choices"][0].get("text") is not None:
                    first = time.perf_counter() - start
                    response.read()
                    return first
    raise RuntimeError("the stream ended without a token")


def measure(server: TachyonServer, requests: int, tokens: int) -> dict:
    prompts = prompts_of(server, requests, tokens)
    time_to_first_token(server, prompts[-1])  # warm-up: pages, threads, the first step
    times = [time_to_first_token(server, p) for p in prompts[:requests]]
    return {"median_ms": round(statistics.median(times) * 1000, 2),
            "min_ms": round(min(times) * 1000, 2), "max_ms": round(max(times) * 1000, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build/tachyon"))
    parser.add_argument("-m", "--model", default=None, help="default: the default model")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--four-ranks", action="store_true",
                        help="also TP=2 x PP=2 (4 ranks, 2 per core on a 2-core machine)")
    args = parser.parse_args()
    common = ["--model-alias", "m", "-c", str(args.prompt_tokens + 64)]
    # The engine's default step size: a prompt runs in steps of this many tokens.
    result = {"prompt_tokens": args.prompt_tokens, "requests": args.requests,
              "max_batch_tokens": 256}
    with TachyonServer(args.tachyon, args.model, ["-t", "2", *common],
                       startup_timeout=600) as server:
        result["one_t2"] = measure(server, args.requests, args.prompt_tokens)
    layouts = [("tp2", 2, 1), ("pp2", 1, 2)]
    if args.four_ranks:
        layouts.append(("tp2pp2", 2, 2))
    for name, tp, pp in layouts:
        with MpiServer(args.tachyon, args.model, tp, pp, ["-t", "1", *common],
                       startup_timeout=600) as server:
            result[name] = measure(server, args.requests, args.prompt_tokens)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
