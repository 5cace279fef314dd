#!/usr/bin/env python3
"""StreamingLLM in the cache (`tachyon perplexity --stream`): a 20K-token stream of the corpus
through a cache of 1,024 tokens that keeps the first 4 (the attention sinks), drops 128 after
them whenever it is full and turns the rest's keys back by 128 positions. Its perplexity stays
within 5% of recomputing the window from scratch for every 128 tokens (`--stride 128`: the
same tokens scored, each with as much context), also with a q8 cache (quantized again at each
move); the same window without sink tokens does clearly worse (StreamingLLM's finding).
`generate` and `chat` take `--context-overflow sink` too: generation runs on past the context
and a prompt longer than the context is cut, not refused.

Gemma 3 270M (sliding-window layers with their own RoPE base beside global ones; lost without
its BOS first) streams 5,120 tokens through 1,024 with 4 sink tokens within 1% of recomputing
the same tokens (`--stride` with `--sink-tokens 4`: the first 4, then the last 1,020); turning
every layer's keys with the global RoPE instead measured 10x worse.

    .venv/bin/python tests/cli/streaming_perplexity_test.py --tachyon build/tachyon
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "api"))
from checks import check, exit_status, info  # noqa: E402

CORPUS = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"
WINDOW, STRIDE = 1024, 128
TOKENS = WINDOW + 160 * STRIDE  # 20,480 scored


GEMMA = (Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon")) / "models" /
         "gemma-3-270m-q4_k_m.gguf")
GEMMA_TOKENS = WINDOW + 40 * STRIDE


def perplexity(tachyon: str, *args: str, tokens: int = TOKENS) -> dict:
    result = subprocess.run([tachyon, "perplexity", "-f", str(CORPUS), "--ctx", str(WINDOW),
                             "--max-tokens", str(tokens), "--stride", str(STRIDE), "--json",
                             *args], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    report = json.loads(result.stdout)
    info(f"{' '.join(args) or 'recompute'}: perplexity {report['perplexity']:.4f} over "
         f"{report['tokens']} tokens")
    return report


def run(tachyon: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([tachyon, *args], capture_output=True, text=True, input=stdin,
                          timeout=300)


def check_commands(t: str) -> None:
    sink = run(t, "generate", "-p", "Once upon a time", "-c", "256", "-n", "700", "--ignore-eos",
               "--temperature", "0", "--context-overflow", "sink", "--json")
    report = json.loads(sink.stdout) if sink.returncode == 0 else {}
    info(f"generate, sink: {report.get('completion_tokens')} tokens in a 256-token context, "
         f"{report.get('dropped_tokens')} dropped")
    check("generate --context-overflow sink runs on past the context",
          report.get("completion_tokens") == 700 and report.get("dropped_tokens", 0) >= 700 - 256,
          sink.stderr[-300:])
    plain = run(t, "generate", "-p", "Once upon a time", "-c", "256", "-n", "700", "--ignore-eos",
                "--temperature", "0", "--json")
    report = json.loads(plain.stdout) if plain.returncode == 0 else {}
    check("... without it generation stops at the full context",
          report.get("finish_reason") == "length" and report.get("completion_tokens", 999) < 256,
          plain.stdout[-300:] + plain.stderr[-300:])
    long_prompt = CORPUS.read_text()[:6000]
    cut = run(t, "generate", "-p", long_prompt, "-c", "256", "-n", "8", "--temperature", "0",
              "--context-overflow", "sink", "--json")
    report = json.loads(cut.stdout) if cut.returncode == 0 else {}
    check("generate, sink: a prompt longer than the context is cut and answered",
          report.get("completion_tokens") == 8 and report.get("dropped_tokens", 0) > 1000,
          cut.stderr[-300:])
    refused = run(t, "generate", "-p", long_prompt, "-c", "256", "-n", "8")
    check("... without it the prompt is refused", refused.returncode != 0, refused.stderr[-300:])
    turns = "".join(f"Tell me more about the sea, part {i}.\n" for i in range(6)) + "/exit\n"
    chat = run(t, "chat", "-c", "128", "-n", "40", "--temperature", "0", "--context-overflow",
               "sink", stdin=turns)
    check("chat --context-overflow sink: six turns in a 128-token context, no error",
          chat.returncode == 0 and "error" not in chat.stderr, chat.stderr[-300:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tachyon", required=True)
    t = parser.parse_args().tachyon
    check_commands(t)
    reference = perplexity(t)
    sinks = perplexity(t, "--stream", "--sink-tokens", "4")
    sinks_q8 = perplexity(t, "--stream", "--sink-tokens", "4", "--cache-type", "q8")
    no_sinks = perplexity(t, "--stream", "--sink-tokens", "0")
    check("the same 20,480 tokens are scored each way",
          reference["tokens"] == sinks["tokens"] == no_sinks["tokens"] == 160 * STRIDE,
          (reference["tokens"], sinks["tokens"], no_sinks["tokens"]))
    ratio = sinks["perplexity"] / reference["perplexity"]
    check(f"stream with 4 sink tokens within 5% of recomputing the window ({100 * (ratio - 1):+.2f}%)",
          ratio < 1.05, ratio)
    ratio_q8 = sinks_q8["perplexity"] / reference["perplexity"]
    check(f"... with a q8 cache too ({100 * (ratio_q8 - 1):+.2f}%)", ratio_q8 < 1.05, ratio_q8)
    worse = no_sinks["perplexity"] / sinks["perplexity"]
    check(f"the same window without sink tokens does worse (x{worse:.2f})",
          worse > 1.2 and no_sinks["perplexity"] / reference["perplexity"] > 1.05, worse)

    # A sliding-window model: each layer's keys turn back with its own RoPE.
    gemma = ("-m", str(GEMMA), "--sink-tokens", "4")
    recomputed = perplexity(t, *gemma, tokens=GEMMA_TOKENS)
    streamed = perplexity(t, *gemma, "--stream", tokens=GEMMA_TOKENS)
    ratio = streamed["perplexity"] / recomputed["perplexity"]
    check(f"Gemma 3: the stream within 1% of recomputing its tokens ({100 * (ratio - 1):+.2f}%)",
          recomputed["tokens"] == streamed["tokens"] == 40 * STRIDE and abs(ratio - 1) < 0.01,
          (recomputed, streamed))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
