#!/usr/bin/env python3
"""Speculative-decoding benchmark: decode speed with each proposer against speculation off, on
the committed prompts of bench/speculative_prompts.json (44 input-grounded tasks, 22 open-ended
ones; tools/make_speculative_prompts.py writes them), through `tachyon serve` and the HTTP API
as users run it, and llama.cpp's prompt lookup (llama-cpp-python's LlamaPromptLookupDecoding)
on the same prompts for the peer's ratio.

    .venv/bin/python bench/speculative_bench.py [--modes off,ngram,suffix] [--threads 2]
        [--max-tokens 128] [--concurrency 4,32] [--skip-llamacpp] [--json]

Per mode (one server each, started with --speculative MODE; all up at once, each prompt sent to
each in turn):
- one request at a time over each prompt set (chat, greedy, streamed): decode tokens/s = the
  set's generated tokens after the first / the time from each request's first to last token
  (prompt processing excluded), and the answers themselves (every mode must give the same
  bytes: the script counts the answers that differ from mode `off`);
- C concurrent closed-loop streams (each C of --concurrency) over the grounded prompts, each
  client sending --requests-per-client requests: total output tokens / wall time;
- the server's /metrics draft counters (acceptance, mean accepted length).
Draft model rows: --draft-target (default: the default model as F16, from
tools/make_model_variant.py --type F16) served alone and with --draft-model (default: the
default Q4_1 file), the same prompts.
llama.cpp: the same chat prompts, one at a time, through llama-cpp-python (its sdist's package
with llama.cpp built natively by bench/build_llama_server.sh, imported from .peers/venv; both
made here when missing) with and without LlamaPromptLookupDecoding (num_pred_tokens 2, the
binding's advice for CPUs, and 10, its default).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai client in tachyon's .venv ships its HTTP library as httpx2
    import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "api"))
from server_fixture import TachyonServer, http_get  # noqa: E402

PROMPTS = ROOT / "bench" / "speculative_prompts.json"
DEFAULT_MODEL = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache" / "tachyon")) / \
    "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


async def stream_chat(client, model: str, messages: list, max_tokens: int) -> dict:
    """One streamed greedy chat request: {text, tokens, first, last} (perf_counter times)."""
    body = {"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    record = {"text": "", "tokens": 0, "first": None, "last": None}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            if chunk.get("usage"):
                record["tokens"] = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    now = time.perf_counter()
                    record["first"] = record["first"] or now
                    record["last"] = now
                    record["text"] += text
    return record


def decode_rate(records: list[dict]) -> float:
    tokens = sum(max(0, r["tokens"] - 1) for r in records)
    seconds = sum(r["last"] - r["first"] for r in records if r["first"] is not None)
    return tokens / seconds if seconds > 0 else 0.0


async def one_at_a_time(url: str, model: str, prompts: list[dict], max_tokens: int) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        return [await stream_chat(client, model, p["messages"], max_tokens) for p in prompts]


async def concurrent(url: str, model: str, prompts: list[dict], clients: int, per_client: int,
                     max_tokens: int) -> float:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as client:
        async def loop(index: int) -> int:
            total = 0
            for i in range(per_client):
                prompt = prompts[(index * per_client + i) % len(prompts)]
                total += (await stream_chat(client, model, prompt["messages"], max_tokens))["tokens"]
            return total

        start = time.perf_counter()
        tokens = sum(await asyncio.gather(*(loop(i) for i in range(clients))))
        return tokens / (time.perf_counter() - start)


def spec_counters(url: str) -> dict:
    status, body = http_get(url + "/metrics")
    counters = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    names = {"tachyon:spec_decode_num_drafts_total": "drafts",
             "tachyon:spec_decode_num_draft_tokens_total": "draft_tokens",
             "tachyon:spec_decode_num_accepted_tokens_total": "accepted"}
    for line in body.decode().splitlines():
        for name, key in names.items():
            if line.startswith(name + "{"):
                counters[key] += float(line.rsplit(" ", 1)[1])
    return counters


def run_tachyon(args, model_path: str, modes: dict[str, list[str]], prompts: dict) -> dict:
    """`modes`: name -> the server's speculation flags. Every mode's server runs at once (an
    idle server takes no CPU) and each prompt goes to every server in turn, so that the
    machine's drifting speed hits all modes alike."""
    results = {mode: {"mode": mode} for mode in modes}
    with contextlib.ExitStack() as stack:
        servers = {}
        for mode, flags in modes.items():
            server_args = ["-t", str(args.threads), "-c", "4096", "--max-running", "64", *flags]
            servers[mode] = stack.enter_context(
                TachyonServer(args.tachyon, model_path, args=server_args, quiet=True))
        with httpx.Client(base_url=next(iter(servers.values())).url, timeout=60) as client:
            model = client.get("/v1/models").json()["data"][0]["id"]
        for mode, server in servers.items():  # warm-up: page the weights in, grow the buffers
            asyncio.run(one_at_a_time(server.url, model, prompts["open"][:2], 16))
        for name in ("grounded", "open"):
            records = {mode: [] for mode in modes}
            for prompt in prompts[name]:
                for mode, server in servers.items():
                    records[mode] += asyncio.run(
                        one_at_a_time(server.url, model, [prompt], args.max_tokens))
            for mode in modes:
                results[mode][name] = decode_rate(records[mode])
                results[mode][name + "_texts"] = [r["text"] for r in records[mode]]
        for mode, server in servers.items():
            counters = spec_counters(server.url)
            results[mode]["acceptance"] = counters["accepted"] / counters["draft_tokens"] \
                if counters["draft_tokens"] else 0.0
            results[mode]["mean_accepted_length"] = counters["accepted"] / counters["drafts"] \
                if counters["drafts"] else 0.0
        for clients in args.concurrency:
            for mode, server in servers.items():
                results[mode][f"streams{clients}"] = asyncio.run(concurrent(
                    server.url, model, prompts["grounded"], clients, args.requests_per_client,
                    args.max_tokens))
    return results


LLAMACPP_SCRIPT = r"""
import json, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
model, threads, max_tokens, pred = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prompts = json.load(open(sys.argv[5]))
draft = LlamaPromptLookupDecoding(num_pred_tokens=pred) if pred > 0 else None
llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=4096, n_batch=512,
            draft_model=draft, verbose=False)
out = {}
llm.create_chat_completion(messages=prompts["open"][0]["messages"], temperature=0, max_tokens=8)
for name in ("grounded", "open"):
    tokens = 0; seconds = 0.0; texts = []
    for p in prompts[name]:
        first = last = None; text = ""; count = 0
        for chunk in llm.create_chat_completion(messages=p["messages"], temperature=0,
                                                max_tokens=max_tokens, stream=True):
            piece = chunk["choices"][0]["delta"].get("content")
            if piece:
                now = time.perf_counter(); first = first or now; last = now
                text += piece; count += 1
        texts.append(text)
        if first is not None:
            tokens += max(0, count - 1); seconds += last - first
    out[name] = tokens / seconds if seconds > 0 else 0.0
    out[name + "_texts"] = texts
print(json.dumps(out))
"""


def llamacpp_environment() -> dict[str, str]:
    """llama-cpp-python's package from its sdist and llama.cpp's libraries built natively
    (bench/build_llama_server.sh, ~25 min the first time), with .peers/venv for its imports."""
    python = ROOT / ".peers/venv/bin/python"
    if not python.exists():
        subprocess.run(["python3", "-m", "venv", str(python.parent.parent)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "numpy", "diskcache",
                        "jinja2", "typing_extensions"], check=True)
    built = subprocess.run([str(ROOT / "bench/build_llama_server.sh")], capture_output=True,
                           text=True, check=True, cwd=ROOT)
    library = Path(built.stdout.strip().splitlines()[-1]).parent
    return dict(os.environ, PYTHONPATH=str(ROOT / ".peers/llama-server/src"),
                LLAMA_CPP_LIB_PATH=str(library))


def run_llamacpp(args, pred: int, env: dict[str, str]) -> dict:
    output = subprocess.run(
        [str(ROOT / ".peers/venv/bin/python"), "-c", LLAMACPP_SCRIPT, args.model,
         str(args.threads), str(args.max_tokens), str(pred), str(PROMPTS)],
        env=env, capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="off,ngram,suffix",
                        help="prompt-lookup modes on --model (off is always run)")
    parser.add_argument("--draft-target", default=str(DEFAULT_MODEL.with_name(
        "SmolLM2-135M-Instruct.F16-from-Q4_1.gguf")),
                        help="the target of the draft-model rows (tools/make_model_variant.py "
                             "--type F16 writes the default one); '' skips them")
    parser.add_argument("--draft-model", default=str(DEFAULT_MODEL),
                        help="the draft model for --draft-target")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", default="4,32")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--skip-llamacpp", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    prompts = json.loads(PROMPTS.read_text())
    modes = {"off": ["--speculative", "off"]}
    for mode in args.modes.split(","):
        modes[mode] = ["--speculative", mode]
    results = run_tachyon(args, args.model, modes, prompts)
    draft_results = {}
    if args.draft_target:
        draft_results = run_tachyon(args, args.draft_target,
                                    {"off": ["--speculative", "off"],
                                     "draft": ["--draft-model", args.draft_model]}, prompts)
    peers = {}
    if not args.skip_llamacpp:
        env = llamacpp_environment()
        for pred in (0, 2, 10):
            peers[pred] = run_llamacpp(args, pred, env)
    if args.json:
        print(json.dumps({"tachyon": results, "draft": draft_results, "llamacpp": peers}))
        return 0

    print(f"{args.threads} threads, {args.max_tokens} tokens per answer, greedy, chat template, "
          f"one request at a time unless noted\n")
    print("| model | tachyon | grounded tok/s | vs off | open-ended tok/s | vs off | acceptance | "
          "mean accepted | answers differing from off |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path, table in ((args.model, results), (args.draft_target, draft_results)):
        if not table:
            continue
        base = table["off"]
        for mode, r in table.items():
            differing = sum(a != b for name in ("grounded", "open")
                            for a, b in zip(r[name + "_texts"], base[name + "_texts"]))
            print(f"| {Path(path).name} | {mode} | {r['grounded']:.1f} | "
                  f"{r['grounded'] / base['grounded']:.2f}x | {r['open']:.1f} | "
                  f"{r['open'] / base['open']:.2f}x | {r['acceptance']:.2f} | "
                  f"{r['mean_accepted_length']:.2f} | {differing} |")
    base = results["off"]
    for clients in args.concurrency:
        key = f"streams{clients}"
        cells = " | ".join(f"{mode} {r[key]:.1f} ({r[key] / base[key]:.2f}x)"
                           for mode, r in results.items())
        print(f"\n{clients} concurrent streams (grounded, {Path(args.model).name}), output tok/s: "
              f"{cells}")
    if peers:
        print("\n| llama.cpp | grounded tok/s | vs off | open-ended tok/s | vs off |")
        print("|---|---|---|---|---|")
        for pred, r in peers.items():
            name = "off" if pred == 0 else f"prompt lookup, {pred} tokens"
            print(f"| {name} | {r['grounded']:.1f} | {r['grounded'] / peers[0]['grounded']:.2f}x | "
                  f"{r['open']:.1f} | {r['open'] / peers[0]['open']:.2f}x |")
        for mode, r in results.items():
            if mode == "off":
                continue
            print(f"\ntachyon {mode} / llama.cpp best lookup, grounded: "
                  f"{r['grounded'] / max(p['grounded'] for p in peers.values()):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
