#!/usr/bin/env python3
"""Measures what `bench/scale_model.py validate` needs on this machine (issue 28), into one JSON
file like bench/dist/measured_zen3.json: the collectives' times against size (2 ranks), the
default model's pp512 / tg128 / batched16 in one process at 1 and 2 threads, over 2 ranks
(--tp 2, --pp 2, one thread each) and over 4 (--tp 2 --pp 2), and the time to first token through `serve` in those layouts
(bench/dist/serve_ttft.py). Run it on a quiet machine; it takes about ten minutes.

    .venv/bin/python bench/dist/measure_validation.py --machine "Intel Xeon (...), 2 vCPUs" \\
        --out bench/dist/measured_NAME.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/dist"))
from parallel_test import MPI_ENV, mpirun  # noqa: E402

TESTS = ("pp512", "tg128", "batched16")


def run(argv: list[str], stderr: list[str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, **MPI_ENV})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    if stderr is not None:
        stderr.append(done.stderr)
    return done.stdout


def bench(tachyon: str, threads: int, split: list[str] | None = None,
          stderr: list[str] | None = None, ranks: int = 2) -> dict[str, float]:
    argv = [tachyon, "bench", "-p", "512", "-n", "128", "-r", "3", "--parallel", "16",
            "-t", str(threads), "--json"]
    if split:
        argv = mpirun(ranks, argv + split)
    rows = json.loads(run(argv, stderr).strip().splitlines()[-1])
    return {row["test"]: round(row["tokens_per_second"], 2) for row in rows
            if row.get("test") in TESTS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build/tachyon"))
    parser.add_argument("--machine", required=True, help="what the machine is, for the file")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    # The model's shape and each rank's weights do not depend on the machine.
    model = json.loads((ROOT / "bench/dist/measured_zen3.json").read_text())["model"]
    collectives = [json.loads(line) for line in
                   run(mpirun(2, [str(ROOT / "build/bench/collectives_benchmark"),
                                  "--max-bytes", "4194304"])).splitlines()
                   if line.startswith("{")]
    pp_log: list[str] = []
    four_log: list[str] = []
    result = {
        "machine": args.machine,
        "cores": os.cpu_count(),
        "model": model,
        "one_process": {"t1": bench(args.tachyon, 1), "t2": bench(args.tachyon, 2)},
        "measured": {"tp2": bench(args.tachyon, 1, ["--tp", "2"]),
                     "pp2": bench(args.tachyon, 1, ["--pp", "2"], pp_log),
                     # 4 ranks: on a 2-core machine, 2 ranks per core.
                     "tp2pp2": bench(args.tachyon, 1, ["--tp", "2", "--pp", "2"], four_log, 4)},
        "collectives": collectives,
    }
    # Each stage's layers, as the ranks log them ("stage 0 of 2 (layers 0-21)").
    stages = {int(m[0]): int(m[2]) - int(m[1]) + 1 for m in
              re.findall(r"stage (\d+) of 2 \(layers (\d+)-(\d+)\)", pp_log[0])}
    model["pp2_stage_layers"] = [stages[0], stages[1]]
    # Each rank's weights under TP=2 x PP=2 ("rank R: ...; X MiB of weights resident").
    model["rank_weight_mib"]["tp2pp2"] = [
        float(mib) for _, mib in sorted(
            (int(rank), mib) for rank, mib in
            re.findall(r"rank (\d+): .*?; ([0-9.]+) MiB of weights resident", four_log[0]))]
    # TP's all-gathers of the output projection's and the FFN down's input carry 8-bit blocks
    # (int8 values plus an f32 scale and sum per 32: 1.25 bytes a value) on the default model's
    # Q4_1 weights; the hidden rows go as f32.
    model["tp_input_bytes_per_value"] = 1.25
    ttft = run([sys.executable, str(ROOT / "bench/dist/serve_ttft.py"), "--tachyon",
                args.tachyon])
    result["serve_ttft"] = json.loads(ttft)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
