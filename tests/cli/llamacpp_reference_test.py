#!/usr/bin/env python3
"""tachyon against llama.cpp on the default model, using the reference outputs recorded in
tests/golden/llamacpp/reference.json (regenerate with tools/make_llamacpp_reference.py):
  - the prompt and corpus tokenizations are identical;
  - perplexity on tinyshakespeare (first 32,768 tokens, windows of 512) within 0.5%;
  - and, for information, how many free-running 128-token greedy continuations are identical.
    (Token-level agreement is asserted teacher-forced in tests/models/llamacpp_agreement_test:
    free-running continuations part at llama.cpp's near-ties, see that file.)
    .venv/bin/python tests/cli/llamacpp_reference_test.py --tachyon build/tachyon
"""
import argparse
import hashlib
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tachyon_json(tachyon: str, *argv: str) -> dict:
    result = subprocess.run([tachyon, *argv], capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"tachyon {' '.join(argv[:3])} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--shared-dir", default=str(ROOT.parent / "shared"))
    parser.add_argument("--threads", default="2")
    args = parser.parse_args()
    t = args.tachyon
    reference = json.loads((ROOT / "tests/golden/llamacpp/reference.json").read_text())
    failures = []

    # Greedy continuations.
    prompts = reference["greedy"]["prompts"]
    identical = 0
    for prompt in prompts:
        ids = subprocess.run([t, "tokenize", "-p", prompt["prompt"]], capture_output=True,
                             text=True, check=True).stdout
        if json.loads(ids) != prompt["prompt_ids"]:
            failures.append(f"prompt '{prompt['name']}' tokenizes differently from llama.cpp")
        report = tachyon_json(t, "generate", "-p", prompt["prompt"], "-n", "128", "--temperature",
                              "0", "--ignore-eos", "--json", "-t", args.threads)
        ours = report["completion_ids"]
        theirs = prompt["continuation_ids"]
        same = ours == theirs
        identical += same
        first_difference = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                                min(len(ours), len(theirs)))
        margin = prompt["margins"][first_difference] if not same and first_difference < len(prompt["margins"]) else None
        print(f"  {prompt['name']:<20} {'identical' if same else f'differs from token {first_difference} (llama.cpp top-2 margin there {margin})'}")
    print(f"greedy continuations (information): {identical}/{len(prompts)} identical to llama.cpp's "
          f"over all 128 tokens")

    # Perplexity, after checking that the corpus tokenizes the same.
    ppl_ref = reference["perplexity"]
    corpus = Path(args.shared_dir) / "data/corpus" / ppl_ref["corpus"]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as lines:
        lines.write(json.dumps(corpus.read_text()) + "\n")
        lines.flush()
        result = subprocess.run([t, "tokenize", "--no-special", "--jsonl", lines.name],
                                capture_output=True, text=True, check=True)
    tokens = json.loads(result.stdout)[:32768]
    digest = hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()
    if digest != ppl_ref["first_32768_token_ids_sha256"]:
        failures.append("the corpus tokenizes differently from llama.cpp")
    report = tachyon_json(t, "perplexity", "-f", str(corpus), "--ctx", str(ppl_ref["n_ctx"]),
                          "--max-tokens", "32768", "--json", "-t", args.threads)
    relative = abs(report["perplexity"] - ppl_ref["perplexity"]) / ppl_ref["perplexity"]
    print(f"perplexity: tachyon {report['perplexity']:.4f} over {report['tokens']} tokens, "
          f"llama.cpp {ppl_ref['perplexity']:.4f} over {ppl_ref['n_scored_tokens']} tokens: "
          f"{100 * relative:.3f}% apart (limit 0.5%)")
    if report["tokens"] != ppl_ref["n_scored_tokens"]:
        failures.append(f"scored {report['tokens']} tokens, llama.cpp {ppl_ref['n_scored_tokens']}")
    if relative > 0.005:
        failures.append(f"perplexity differs by {100 * relative:.3f}%")

    for failure in failures:
        print(f"FAIL  {failure}")
    checks = 3  # prompt tokenization, corpus tokenization, perplexity
    print(f"{checks - min(checks, len(failures))} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
