#!/usr/bin/env python3
"""tachyon bench against llama.cpp (bench/llamacpp_bench.py) on the same model, machine and
thread count, alternating the two engines round by round so that machine noise hits both, and
printing the ratio as a Markdown table (the one in docs/benchmarks.md).

    .venv-llamacpp/bin/python bench/compare_llamacpp.py [-m MODEL] [-t 2] [-r 5] [--rounds 3]

Needs build/tachyon (make build) and the llama.cpp venv (tools/requirements-llamacpp.txt).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon")) / "models/SmolLM2-135M-Instruct.Q4_1.gguf"


def run_json(command: list[str]) -> dict[str, float]:
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    # (tachyon's report also has entries without a speed: memory, experts)
    return {row["test"]: row["tokens_per_second"] for row in json.loads(result.stdout)
            if "tokens_per_second" in row}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", "--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-r", "--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per engine")
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    args = parser.parse_args()
    common = ["-m", str(args.model), "-t", str(args.threads), "-r", str(args.reps), "-p", "512", "-n", "128"]
    tachyon_runs, llamacpp_runs = [], []
    for _ in range(args.rounds):
        tachyon_runs.append(run_json([args.tachyon, "bench", *common, "--json"]))
        llamacpp_runs.append(run_json([sys.executable, str(ROOT / "bench/llamacpp_bench.py"), *common, "--json"]))
    import llama_cpp
    print(f"model: {args.model.name}; CPU: {cpu_model()}, {os.cpu_count()} cores; threads: {args.threads}; "
          f"llama.cpp: llama-cpp-python {llama_cpp.__version__}; {args.rounds} alternating rounds of "
          f"{args.reps} repetitions, median of the round means\n")
    print("| test | tachyon tokens/s | llama.cpp tokens/s | tachyon / llama.cpp |")
    print("|---|---|---|---|")
    for test in ["pp512", "tg128"]:
        ours = statistics.median(run[test] for run in tachyon_runs)
        theirs = statistics.median(run[test] for run in llamacpp_runs)
        print(f"| {test} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")
    # tachyon bench's decode roofline: measured read bandwidth / bytes read per decoded token.
    rooflines = [run["roofline"] for run in tachyon_runs if "roofline" in run]
    if rooflines:
        roofline = statistics.median(rooflines)
        ours = statistics.median(run["tg128"] for run in tachyon_runs)
        theirs = statistics.median(run["tg128"] for run in llamacpp_runs)
        print(f"\ndecode roofline (tachyon bench: measured read bandwidth / bytes per decoded "
              f"token): {roofline:.1f} tokens/s; tg128 reaches {100 * ours / roofline:.0f}% of it "
              f"(tachyon), {100 * theirs / roofline:.0f}% (llama.cpp)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
