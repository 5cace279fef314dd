#!/usr/bin/env python3
"""SnapKV through the server (`--kv-evict snapkv --kv-evict-budget N`), with the official openai
client: a 1,500-token prompt is compressed to 256 positions per KV head once computed, so while
its answer is generated it holds about 256 positions' blocks instead of 1,500's (KV blocks in
use sampled from /metrics as the answer streams); /metrics counts the compaction and the positions dropped; the first
token is the uncompressed server's (it comes before the compaction) and the answer is text; a
budget below 64 is refused at start. `generate` and `chat` take the same flags. On a
sliding-window model (Gemma 3 270M: window 512) the global layers are compressed and the local
ones keep their recent window; a budget below the window is refused.

    .venv/bin/python tests/api/snapkv_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from kv_disk_test import GEMMA, corpus_prompt  # noqa: E402
from server_fixture import TachyonServer, http_get, parse_prometheus  # noqa: E402

BUDGET, PROMPT, ANSWER = 256, 1500, 120


def metrics(server: TachyonServer) -> dict[str, float]:
    status, body = http_get(server.url + "/metrics")
    return parse_prometheus(body.decode()) if status == 200 else {}


def answer_with_peak(server: TachyonServer, prompt: list[int],
                     answer: int = ANSWER) -> tuple[str, int, float]:
    """A greedy completion, streamed; the most KV blocks in use while its answer was being
    generated (sampled at every 10th chunk, after the first ones)."""
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=answer,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    text, tokens, peak, chunks = "", 0, 0.0, 0
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text
            chunks += 1
            if chunks % 10 == 5:
                peak = max(peak, metrics(server).get("tachyon:kv_cache_blocks_used", 0))
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return text, tokens, peak


def check_snapkv(tachyon: str) -> None:
    prompt = corpus_prompt(tachyon, 30000, PROMPT)
    with TachyonServer(tachyon, args=["--kv-cache-mem", "256MiB"]) as server:
        full, _, full_peak = answer_with_peak(server, prompt)
    with TachyonServer(tachyon, args=["--kv-cache-mem", "256MiB", "--kv-evict", "snapkv",
                                      "--kv-evict-budget", str(BUDGET)]) as server:
        snap, snap_tokens, snap_peak = answer_with_peak(server, prompt)
        values = metrics(server)
    info(f"KV blocks in use: {full_peak:.0f} uncompressed, {snap_peak:.0f} with SnapKV "
         f"(budget {BUDGET})")
    info(f"uncompressed: {full[:80]!r}")
    info(f"SnapKV:       {snap[:80]!r}")
    check("SnapKV answers the whole completion", snap_tokens == ANSWER and snap.strip(),
          snap_tokens)
    check("/metrics: one compaction", values.get("tachyon:snapkv_compactions_total") == 1,
          values.get("tachyon:snapkv_compactions_total"))
    check("/metrics: positions dropped per KV head",
          values.get("tachyon:snapkv_evicted_tokens_total") == PROMPT - BUDGET,
          values.get("tachyon:snapkv_evicted_tokens_total"))
    blocks = (BUDGET + ANSWER) // 16 + 2
    check(f"while generating it holds at most {blocks} blocks (the budget's and the answer's), "
          f"not the prompt's",
          0 < snap_peak <= blocks and full_peak >= PROMPT // 16, (snap_peak, full_peak))
    check("the first word is the uncompressed server's (sampled before the compaction)",
          snap.split()[:1] == full.split()[:1], (snap[:40], full[:40]))
    bad = subprocess.run([tachyon, "serve", "--port", "0", "--kv-evict", "snapkv",
                          "--kv-evict-budget", "16"], capture_output=True, text=True, timeout=60)
    check("a budget below 64 is refused", bad.returncode != 0 and "kv-evict-budget" in bad.stderr,
          bad.stderr[-200:])


def check_commands(tachyon: str) -> None:
    """generate and chat take --kv-evict snapkv too (the single-sequence Generator)."""
    text = (Path(__file__).resolve().parents[3] / "shared/data/corpus/tinyshakespeare.txt"
            ).read_text()[40000:46000]

    def generate(*args: str) -> dict:
        result = subprocess.run([tachyon, "generate", "-p", text, "-c", "4096", "-n", "16",
                                 "--temperature", "0", "--json", *args], capture_output=True,
                                text=True, timeout=300)
        return json.loads(result.stdout) if result.returncode == 0 else {"error": result.stderr}

    plain = generate()
    snap = generate("--kv-evict", "snapkv", "--kv-evict-budget", "256")
    info(f"generate: prompt {snap.get('prompt_tokens')} tokens, SnapKV dropped "
         f"{snap.get('dropped_tokens')} per KV head")
    check("generate --kv-evict snapkv: compacted to the budget, answered",
          snap.get("completion_tokens") == 16 and
          snap.get("dropped_tokens") == snap.get("prompt_tokens", 0) - 256, snap)
    check("... its first token the uncompressed one's",
          snap.get("completion_ids", [None])[:1] == plain.get("completion_ids", [0])[:1],
          (snap.get("completion_ids"), plain.get("completion_ids")))
    chat = subprocess.run([tachyon, "chat", "-n", "12", "--temperature", "0", "--kv-evict",
                           "snapkv", "--kv-evict-budget", "64"],
                          input="Tell me a long story about the sea and the ships on it.\n"
                                "And then?\n/exit\n", capture_output=True, text=True, timeout=300)
    check("chat --kv-evict snapkv: two turns, no error",
          chat.returncode == 0 and "error" not in chat.stderr, chat.stderr[-300:])


def check_sliding_window_model(tachyon: str) -> None:
    budget, answer = 640, 40
    prompt = corpus_prompt(tachyon, 50000, PROMPT, ("-m", str(GEMMA)))
    plain = subprocess.run([tachyon, "generate", "-m", str(GEMMA), "-p", "x", "-n", "1",
                            "--kv-evict", "snapkv", "--kv-evict-budget", "256"],
                           capture_output=True, text=True, timeout=120)
    check("Gemma 3: a budget below its window of 512 is refused",
          plain.returncode != 0 and "sliding window of 512" in plain.stderr, plain.stderr[-300:])
    args = ["-m", str(GEMMA), "--kv-cache-mem", "256MiB"]
    with TachyonServer(tachyon, args=args) as server:
        full, _, full_peak = answer_with_peak(server, prompt, answer)
    with TachyonServer(tachyon, args=[*args, "--kv-evict", "snapkv", "--kv-evict-budget",
                                      str(budget)]) as server:
        snap, snap_tokens, snap_peak = answer_with_peak(server, prompt, answer)
        values = metrics(server)
    info(f"Gemma 3: KV blocks in use (global layers) {full_peak:.0f} uncompressed, "
         f"{snap_peak:.0f} with SnapKV (budget {budget})")
    info(f"Gemma 3 uncompressed: {full[:80]!r}")
    info(f"Gemma 3 SnapKV:       {snap[:80]!r}")
    check("Gemma 3, SnapKV: the whole completion, one compaction",
          snap_tokens == answer and values.get("tachyon:snapkv_compactions_total") == 1,
          (snap_tokens, values.get("tachyon:snapkv_compactions_total")))
    check("Gemma 3, SnapKV: the global layers hold the budget's blocks, not the prompt's",
          0 < snap_peak <= (budget + answer) // 16 + 2 and full_peak >= PROMPT // 16,
          (snap_peak, full_peak))
    check("Gemma 3, SnapKV: the first word is the uncompressed server's",
          snap.split()[:1] == full.split()[:1], (snap[:40], full[:40]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tachyon", required=True)
    args = parser.parse_args()
    section("snapkv", check_snapkv, args.tachyon)
    section("generate and chat", check_commands, args.tachyon)
    section("sliding-window model", check_sliding_window_model, args.tachyon)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
