#!/usr/bin/env python3
"""StreamingLLM in the cache (`tachyon perplexity --stream`): a 20K-token stream of the corpus
through a cache of 1,024 tokens that keeps the first 4 (the attention sinks), drops 128 after
them whenever it is full and turns the rest's keys back by 128 positions. Its perplexity stays
within 5% of recomputing the window from scratch for every 128 tokens (`--stride 128`: the
same tokens scored, each with as much context), also with a q8 cache (quantized again at each
move); the same window without sink tokens does clearly worse (StreamingLLM's finding).

    .venv/bin/python tests/cli/streaming_perplexity_test.py --tachyon build/tachyon
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "api"))
from checks import check, exit_status, info  # noqa: E402

CORPUS = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"
WINDOW, STRIDE = 1024, 128
TOKENS = WINDOW + 160 * STRIDE  # 20,480 scored


def perplexity(tachyon: str, *args: str) -> dict:
    result = subprocess.run([tachyon, "perplexity", "-f", str(CORPUS), "--ctx", str(WINDOW),
                             "--max-tokens", str(TOKENS), "--stride", str(STRIDE), "--json",
                             *args], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    report = json.loads(result.stdout)
    info(f"{' '.join(args) or 'recompute'}: perplexity {report['perplexity']:.4f} over "
         f"{report['tokens']} tokens")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tachyon", required=True)
    t = parser.parse_args().tachyon
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
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
