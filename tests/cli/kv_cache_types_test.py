#!/usr/bin/env python3
"""KV cache types end to end: `--cache-type q8` (int8 with a scale per 32 values) keeps the
default model's perplexity (ctx 2048, a 4K-token slice of the corpus) within 0.1% of f16's, works
through generate, chat and serve (where /metrics shows about half of f16's bytes per token),
and a model whose heads are not whole groups of 32 values gets one clear error line.
    .venv/bin/python tests/cli/kv_cache_types_test.py --tachyon build/tachyon
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "api"))
import tiny_models  # noqa: E402
from checks import check, exit_status, info, section  # noqa: E402
from server_fixture import TachyonServer, http_get, parse_prometheus  # noqa: E402

CORPUS = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"


def run(tachyon: str, *argv: str, stdin: str | None = None):
    return subprocess.run([tachyon, *argv], capture_output=True, text=True, input=stdin,
                          timeout=300)


def perplexity(t: str, cache_type: str) -> float:
    result = run(t, "perplexity", "-f", str(CORPUS), "--ctx", "2048", "--max-tokens", "4096",
                 "--cache-type", cache_type, "--json")
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    report = json.loads(result.stdout)
    info(f"perplexity {cache_type}: {report['perplexity']:.5f} over {report['tokens']} tokens")
    return report["perplexity"]


def check_perplexity(t: str) -> None:
    f16, q8 = perplexity(t, "f16"), perplexity(t, "q8")
    check(f"q8 perplexity within 0.1% of f16 ({100 * (q8 / f16 - 1):+.4f}%)",
          abs(q8 / f16 - 1) < 0.001, f"f16 {f16}, q8 {q8}")


def check_commands(t: str, work: Path) -> None:
    greedy = [run(t, "generate", "-p", "The capital of France is", "-n", "16", "--temperature",
                  "0", "--cache-type", "q8", "-t", "1").stdout for _ in range(2)]
    check("generate --cache-type q8 answers, deterministically",
          greedy[0].strip() and greedy[0] == greedy[1], repr(greedy))
    chat = run(t, "chat", "--temperature", "0", "-n", "12", "--cache-type", "q8",
               stdin="Say hello.\n/exit\n")
    check("chat --cache-type q8 answers", chat.returncode == 0 and chat.stdout.strip(),
          chat.stdout + chat.stderr)
    # A model of 16-value heads (tiny llama_gqa) cannot be cached as q8: one line, exit 1.
    tiny = tiny_models.write_model("llama_gqa", "f32", work / "tiny.gguf")
    result = run(t, "generate", "-m", str(tiny), "-p", "a", "--cache-type", "q8")
    expected = (f"tachyon: error: {tiny}: a q8 KV cache needs heads of a multiple of 32 values; "
                f"this model's hold 16 (use --cache-type f16)")
    check("q8 refused for heads of 16 values, with one clear line",
          result.returncode == 1 and result.stderr.splitlines() == [expected] and not result.stdout,
          f"exit {result.returncode}, stderr {result.stderr!r}")
    # A model of 32-value heads (tiny qwen3) runs with q8.
    qwen3 = tiny_models.write_model("qwen3_qknorm", "f32", work / "qwen3.gguf")
    result = run(t, "generate", "-m", str(qwen3), "-p", "a b c", "-n", "8", "--temperature", "0",
                 "--ignore-eos", "--json", "--cache-type", "q8")
    report = json.loads(result.stdout) if result.returncode == 0 else {}
    check("q8 on a model of 32-value heads", report.get("completion_tokens") == 8,
          result.stdout + result.stderr)
    result = run(t, "generate", "-p", "a", "--cache-type", "q4")
    check("an unknown cache type is refused", result.returncode != 0 and "q4" in result.stderr,
          result.stderr)


def bytes_per_token(server: TachyonServer) -> float:
    status, body = http_get(server.url + "/metrics")
    return parse_prometheus(body.decode())["tachyon:kv_cache_bytes_per_token"]


def complete(server: TachyonServer, prompt: str):
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    return client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)


def check_serve(t: str) -> None:
    per_token = {}
    for cache_type in ("f16", "q8"):
        with TachyonServer(t, args=["--cache-type", cache_type, "--kv-cache-mem", "64MiB"]) as server:
            answer = complete(server, "Once upon a time")
            check(f"serve --cache-type {cache_type} answers (openai client)",
                  answer.choices[0].text and answer.usage.completion_tokens == 12, answer)
            per_token[cache_type] = bytes_per_token(server)
    check("serve: q8's KV bytes per token are 34/64 of f16's",
          per_token["q8"] * 64 == per_token["f16"] * 34, per_token)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tachyon-kv-types-") as work:
        section("perplexity", check_perplexity, args.tachyon)
        section("commands", check_commands, args.tachyon, Path(work))
        section("serve", check_serve, args.tachyon)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
