#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible server (tachyon serve, llama.cpp's llama-server,
bench/llamacpp_server.py, vLLM): closed-loop streaming clients at several concurrency levels.

    .venv/bin/python bench/loadgen.py --url http://127.0.0.1:8080 --clients 1,8,32,64
    .venv/bin/python bench/loadgen.py --url http://127.0.0.1:8080 --prefix-cache-check

Each of C clients sends --requests-per-client streaming requests one after another. A prompt is
a random slice of tinyshakespeare of --prompt-tokens-min..max tokens (the characters-per-token
ratio is measured with the server's /tokenize when it has one, else ~4); every request asks for
exactly --output-tokens tokens (max_tokens plus "ignore_eos": true, which tachyon, vLLM and
llama.cpp all read). Every prompt starts with a unique sentence (see --shared-prompts), and
each level gets fresh prompts, so a prefix cache does not flatter the numbers. Per request it records TTFT (request sent -> first text), the gaps between
text chunks (inter-token latency; servers send one token per chunk), end-to-end time, and
errors. Per concurrency level it prints aggregate output tokens/s (completion tokens of all
requests / wall time of the level), median and p90 TTFT, median and p90 ITL, median e2e, and
the error count.

--prefix-cache-check: 2,000-token prompts whose first 1,900 tokens are one fixed passage.
Cold: each prompt starts with a unique sentence, so no prefix can be reused. Warm: the shared
passage is cached by one untimed request first, then each prompt is passage + its own
100-token tail. Prints the median TTFT of each (requests sent one at a time) and the ratio.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai client in tachyon's .venv ships its HTTP library as httpx2
    import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    low, high = int(k), min(int(k) + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (k - low)


class Target:
    def __init__(self, url: str, model: str | None, endpoint: str, timeout: float):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.endpoint = endpoint
        self.timeout = timeout
        with httpx.Client(base_url=self.url, timeout=60) as client:
            self.model = model or client.get("/v1/models").json()["data"][0]["id"]
            self.chars_per_token = self._measure_ratio(client)

    def _measure_ratio(self, client) -> float:
        sample = CORPUS.read_text()[:20000]
        try:
            response = client.post("/tokenize", json={"content": sample})
            return len(sample) / len(response.json()["tokens"])
        except Exception:  # noqa: BLE001
            return 4.0

    def tokenize(self, text: str) -> list[int] | None:
        try:
            return httpx.post(self.url + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]
        except Exception:  # noqa: BLE001
            return None

    def body(self, prompt: str, output_tokens: int) -> tuple[str, dict]:
        body = {"model": self.model, "max_tokens": output_tokens, "ignore_eos": True, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        if self.endpoint == "chat":
            return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]}
        return "/v1/completions", {**body, "prompt": prompt}


async def stream_request(client, path: str, body: dict) -> dict:
    """One streaming request: {ttft, itls, e2e, completion_tokens, prompt_tokens, cached_tokens, error}."""
    record = {"ttft": None, "itls": [], "e2e": None, "completion_tokens": 0, "prompt_tokens": None,
              "cached_tokens": None, "error": None}
    chat = path.endswith("chat/completions")
    start = time.perf_counter()
    last = None
    chunks = 0
    try:
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                record["error"] = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return record
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    record["error"] = f"error event: {chunk['error']}"
                    break
                if chunk.get("usage"):
                    usage = chunk["usage"]
                    record["completion_tokens"] = usage.get("completion_tokens", 0)
                    record["prompt_tokens"] = usage.get("prompt_tokens")
                    record["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                for choice in chunk.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                    if text:
                        now = time.perf_counter()
                        if last is None:
                            record["ttft"] = now - start
                        else:
                            record["itls"].append(now - last)
                        last = now
                        chunks += 1
    except Exception as error:  # noqa: BLE001
        record["error"] = f"{type(error).__name__}: {error}"
    record["e2e"] = time.perf_counter() - start
    if not record["completion_tokens"]:
        record["completion_tokens"] = chunks   # no usage chunk: one token per chunk
    return record


def make_prompts(target: Target, count: int, low: int, high: int, rng: random.Random,
                 unique: bool) -> list[str]:
    """Random corpus slices. With `unique`, each starts with a sentence of its own, so that no
    prompt shares a prefix with another one (nor with an earlier run's) and a prefix cache
    cannot shorten the prefills."""
    text = CORPUS.read_text()
    prompts = []
    for _ in range(count):
        chars = int(rng.randint(low, high) * target.chars_per_token)
        start = rng.randrange(0, len(text) - chars)
        head = f"Request {uuid.uuid4().hex[:12]}. " if unique else ""
        prompts.append(head + text[start:start + chars - len(head)])
    return prompts


async def run_level(target: Target, clients: int, per_client: int, prompts: list[str],
                    output_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=target.url, timeout=target.timeout, limits=limits) as client:
        async def client_loop(index: int) -> list[dict]:
            records = []
            for i in range(per_client):
                path, body = target.body(prompts[index * per_client + i], output_tokens)
                records.append(await stream_request(client, path, body))
            return records

        start = time.perf_counter()
        per_task = await asyncio.gather(*(client_loop(i) for i in range(clients)))
        wall = time.perf_counter() - start
    records = [r for rs in per_task for r in rs]
    good = [r for r in records if not r["error"]]
    ttfts = [r["ttft"] for r in good if r["ttft"] is not None]
    itls = [x for r in good for x in r["itls"]]
    output = sum(r["completion_tokens"] for r in good)
    return {"clients": clients, "requests": len(records), "errors": len(records) - len(good),
            "wall_s": wall, "output_tokens": output, "output_tokens_per_s": output / wall,
            "requests_per_s": len(good) / wall,
            "ttft_median_s": percentile(ttfts, 0.5), "ttft_p90_s": percentile(ttfts, 0.9),
            "itl_median_s": percentile(itls, 0.5), "itl_p90_s": percentile(itls, 0.9),
            "e2e_median_s": percentile([r["e2e"] for r in good], 0.5),
            "prompt_tokens_mean": statistics.mean([r["prompt_tokens"] for r in good if r["prompt_tokens"]] or [0]),
            "first_errors": [r["error"] for r in records if r["error"]][:3]}


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def print_table(rows: list[dict]) -> None:
    print("| clients | requests | output tok/s | req/s | TTFT p50 ms | TTFT p90 ms | ITL p50 ms | "
          "ITL p90 ms | e2e p50 s | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        e2e = "-" if r["e2e_median_s"] is None else f"{r['e2e_median_s']:.2f}"
        print(f"| {r['clients']} | {r['requests']} | {r['output_tokens_per_s']:.1f} | {r['requests_per_s']:.2f} | "
              f"{ms(r['ttft_median_s'])} | {ms(r['ttft_p90_s'])} | {ms(r['itl_median_s'])} | "
              f"{ms(r['itl_p90_s'])} | {e2e} | {r['errors']} |")
        for error in r["first_errors"]:
            print(f"    error: {error}", file=sys.stderr)


async def prefix_cache_check(target: Target, count: int, prefix_tokens: int, total_tokens: int,
                             output_tokens: int) -> dict:
    text = CORPUS.read_text()
    ratio = target.chars_per_token

    def take(start: int, tokens: int) -> str:
        piece = text[start:start + int(tokens * ratio * 1.2)]
        ids = target.tokenize(piece)
        if ids:   # trim to the token count by the measured ratio of this very piece
            piece = piece[:int(len(piece) * tokens / len(ids))]
        else:
            piece = piece[:int(tokens * ratio)]
        return piece

    prefix = take(200000, prefix_tokens)
    # Each tail opens with a tag of its own, so no run can reuse more than the shared passage.
    tails = [f" [{uuid.uuid4().hex[:8]}] " + take(400000 + i * 5000, total_tokens - prefix_tokens - 8)
             for i in range(count + 1)]
    async with httpx.AsyncClient(base_url=target.url, timeout=target.timeout) as client:
        async def timed(prompt: str) -> dict:
            path, body = target.body(prompt, output_tokens)
            record = await stream_request(client, path, body)
            if record["error"]:
                raise SystemExit(f"request failed: {record['error']}")
            return record

        await timed("Warm up. " + tails[-1])
        cold = [await timed(f"Request {uuid.uuid4().hex} begins here. " + prefix + tails[i]) for i in range(count)]
        await timed(prefix + tails[-1])      # caches the shared passage
        warm = [await timed(prefix + tails[i]) for i in range(count)]
    cold_ttft = statistics.median(r["ttft"] for r in cold)
    warm_ttft = statistics.median(r["ttft"] for r in warm)
    return {"requests_each": count, "prompt_tokens": statistics.median(r["prompt_tokens"] or 0 for r in warm),
            "cold_ttft_median_s": cold_ttft, "warm_ttft_median_s": warm_ttft,
            "cold_over_warm": cold_ttft / warm_ttft,
            "warm_cached_tokens_median": statistics.median(r["cached_tokens"] or 0 for r in warm),
            "cold_cached_tokens_median": statistics.median(r["cached_tokens"] or 0 for r in cold)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL (with or without /v1)")
    parser.add_argument("--model", help="model id (default: the first of GET /v1/models)")
    parser.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    parser.add_argument("--clients", default="1,8,32,64", help="comma-separated concurrency levels")
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--prompt-tokens-min", type=int, default=128)
    parser.add_argument("--prompt-tokens-max", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0, help="prompt choice")
    parser.add_argument("--shared-prompts", action="store_true",
                        help="no unique first sentence: the same seed gives the same prompts, which a "
                             "prefix cache may serve from an earlier run")
    parser.add_argument("--timeout", type=float, default=900, help="per request, seconds")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--prefix-cache-check", action="store_true")
    parser.add_argument("--prefix-requests", type=int, default=8, help="cold and warm requests each")
    args = parser.parse_args()

    endpoint = "completions" if args.prefix_cache_check and "--endpoint" not in sys.argv else args.endpoint
    target = Target(args.url, args.model, endpoint, args.timeout)
    if args.prefix_cache_check:
        result = asyncio.run(prefix_cache_check(target, args.prefix_requests, 1900, 2000, 4))
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(f"prefix cache ({target.url}, {target.model}, /v1/{endpoint}): "
                  f"{result['prompt_tokens']:.0f}-token prompts, {args.prefix_requests} cold and warm each")
            print(f"  cold TTFT median {ms(result['cold_ttft_median_s'])} ms "
                  f"(cached_tokens median {result['cold_cached_tokens_median']:.0f})")
            print(f"  warm TTFT median {ms(result['warm_ttft_median_s'])} ms "
                  f"(cached_tokens median {result['warm_cached_tokens_median']:.0f})")
            print(f"  cold / warm = {result['cold_over_warm']:.2f}x")
        return 0

    levels = [int(c) for c in args.clients.split(",") if c.strip()]
    rng = random.Random(args.seed)
    asyncio.run(run_level(target, 1, 1, make_prompts(target, 1, 16, 32, rng, True), 8))  # warm-up
    rows = []
    for clients in levels:   # fresh prompts for every level
        prompts = make_prompts(target, clients * args.requests_per_client, args.prompt_tokens_min,
                               args.prompt_tokens_max, rng, not args.shared_prompts)
        rows.append(asyncio.run(run_level(target, clients, args.requests_per_client, prompts,
                                          args.output_tokens)))
        if not args.json:
            print(f"clients {clients}: {rows[-1]['output_tokens_per_s']:.1f} output tok/s, "
                  f"{rows[-1]['errors']} errors", file=sys.stderr)
    if args.json:
        print(json.dumps({"url": target.url, "model": target.model, "endpoint": endpoint,
                          "prompt_tokens": [args.prompt_tokens_min, args.prompt_tokens_max],
                          "output_tokens": args.output_tokens, "levels": rows}, indent=1))
    else:
        print(f"{target.url} model {target.model}, /v1/{endpoint}, prompts {args.prompt_tokens_min}-"
              f"{args.prompt_tokens_max} tokens, {args.output_tokens} output tokens, "
              f"{args.requests_per_client} requests per client\n")
        print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
