#!/usr/bin/env python3
"""tachyon against llama.cpp on the default model, using the reference outputs recorded in
tests/golden/llamacpp/reference.json (regenerate with tools/make_llamacpp_reference.py):
  - the prompt and corpus tokenizations are identical;
  - perplexity on tinyshakespeare (windows of 512) within 0.5% of llama.cpp's over the same
    windows: the first 8 (4,096 tokens) by default (`make test`), all 64 (32,768 tokens,
    minutes on 2 cores) with --full (`make test-reference`);
  - with --numerics llama.cpp (llama.cpp's arithmetic) the free-running 128-token greedy
    continuations are identical to llama.cpp's: the first 4 prompts all by default, at least 9
    of all 10 with --full, which also prints how many tachyon's own kernels give for
    information (they part at llama.cpp's near-ties; token-level agreement is asserted
    teacher-forced in tests/models/llamacpp_agreement_test);
  - with --numerics llama.cpp the perplexity equals llama.cpp's to 1e-6 over the first window
    (the first 8 with --full): that arithmetic runs its reference loops, ~7 s a window on 2
    Zen 3 cores.
    .venv/bin/python tests/cli/llamacpp_reference_test.py --tachyon build/tachyon [--full]
"""
import argparse
import hashlib
import json
import math
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


def check_greedy(t: str, threads: str, reference: dict, failures: list[str], full: bool) -> None:
    # Greedy continuations: with llama.cpp's arithmetic (--numerics llama.cpp) they must be
    # identical (the issue asks for >= 9 of 10); tachyon's own kernels round differently and
    # part from llama.cpp at its near-ties (reported for information; their token-level
    # agreement is asserted teacher-forced in tests/models/llamacpp_agreement_test).
    prompts = reference["greedy"]["prompts"]
    identical = {"llama.cpp": 0, "native": 0} if full else {"llama.cpp": 0}
    for prompt in prompts:  # every prompt's tokenization, even those not generated from
        ids = subprocess.run([t, "tokenize", "-p", prompt["prompt"]], capture_output=True,
                             text=True, check=True).stdout
        if json.loads(ids) != prompt["prompt_ids"]:
            failures.append(f"prompt '{prompt['name']}' tokenizes differently from llama.cpp")
    prompts = prompts if full else prompts[:4]
    for prompt in prompts:
        theirs = prompt["continuation_ids"]
        for numerics in identical:
            report = tachyon_json(t, "generate", "-p", prompt["prompt"], "-n", "128",
                                  "--temperature", "0", "--ignore-eos", "--json", "-t",
                                  threads, "--numerics", numerics)
            ours = report["completion_ids"]
            same = ours == theirs
            identical[numerics] += same
            first_difference = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                                    min(len(ours), len(theirs)))
            margin = (prompt["margins"][first_difference]
                      if not same and first_difference < len(prompt["margins"]) else None)
            print(f"  {prompt['name']:<20} --numerics {numerics:<10} "
                  f"{'identical' if same else f'differs from token {first_difference} (llama.cpp top-2 margin there {margin})'}")
    required = 9 if full else len(prompts)
    print(f"greedy continuations identical to llama.cpp's over all 128 tokens: "
          f"{identical['llama.cpp']}/{len(prompts)} with --numerics llama.cpp (at least "
          f"{required} required)" +
          (f", {identical['native']}/{len(prompts)} with tachyon's own kernels (information)"
           if full else ""))
    if identical["llama.cpp"] < required:
        failures.append(f"only {identical['llama.cpp']}/{len(prompts)} continuations identical "
                        f"with --numerics llama.cpp")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--shared-dir", default=str(ROOT.parent / "shared"))
    parser.add_argument("--threads", default="2")
    parser.add_argument("--full", action="store_true",
                        help="all 10 greedy prompts with both arithmetics, perplexity over all "
                        "64 recorded windows (32,768 tokens) and with llama.cpp's arithmetic "
                        "over 8")
    args = parser.parse_args()
    t = args.tachyon
    reference = json.loads((ROOT / "tests/golden/llamacpp/reference.json").read_text())
    failures = []

    check_greedy(t, args.threads, reference, failures, args.full)

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
    # llama.cpp's perplexity over the windows scored here (all 64, or the first 8), from its
    # per-window mean NLLs (each window scores the same number of tokens).
    scored_windows = ppl_ref["n_windows"] if args.full else 8
    window_nll = ppl_ref["window_mean_nll"][:scored_windows]
    expected = (ppl_ref["perplexity"] if args.full
                else math.exp(sum(window_nll) / scored_windows))
    expected_tokens = ppl_ref["n_scored_tokens"] * scored_windows // ppl_ref["n_windows"]
    report = tachyon_json(t, "perplexity", "-f", str(corpus), "--ctx", str(ppl_ref["n_ctx"]),
                          "--max-tokens", str(scored_windows * ppl_ref["n_ctx"]), "--json", "-t",
                          args.threads)
    relative = abs(report["perplexity"] - expected) / expected
    print(f"perplexity: tachyon {report['perplexity']:.4f} over {report['tokens']} tokens, "
          f"llama.cpp {expected:.4f} over {expected_tokens} tokens ({scored_windows} windows): "
          f"{100 * relative:.3f}% apart (limit 0.5%)")
    if report["tokens"] != expected_tokens:
        failures.append(f"scored {report['tokens']} tokens, llama.cpp {expected_tokens}")
    if relative > 0.005:
        failures.append(f"perplexity differs by {100 * relative:.3f}%")

    # With llama.cpp's arithmetic the logits are llama.cpp's, so perplexity over the first
    # windows equals llama.cpp's (its per-window mean NLLs are recorded to 6 decimals).
    windows = 8 if args.full else 1
    expected = math.exp(sum(ppl_ref["window_mean_nll"][:windows]) / windows)
    report = tachyon_json(t, "perplexity", "-f", str(corpus), "--ctx", str(ppl_ref["n_ctx"]),
                          "--max-tokens", str(windows * ppl_ref["n_ctx"]), "--json", "-t",
                          args.threads, "--numerics", "llama.cpp")
    relative = abs(report["perplexity"] - expected) / expected
    print(f"perplexity over the first {windows} windows with --numerics llama.cpp: "
          f"{report['perplexity']:.6f}, llama.cpp {expected:.6f} ({relative:.1e} apart, limit 1e-6)")
    if relative > 1e-6:
        failures.append(f"--numerics llama.cpp perplexity is {relative:.1e} from llama.cpp's")

    # prompt tokenization, greedy identity, corpus tokenization, two perplexities
    return report_failures(failures, checks=5)


def report_failures(failures: list[str], checks: int) -> int:
    for failure in failures:
        print(f"FAIL  {failure}")
    print(f"{checks - min(checks, len(failures))} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
