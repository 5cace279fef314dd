#!/usr/bin/env python3
"""A MoE model larger than RAM (issue 24's beyond-RAM rows): tachyon with --experts-mem at half
the machine's RAM against llama.cpp on the same file through its mmap (the kernel's page cache
as its expert cache), decode tokens/s, and tachyon's expert-cache hit rate, for skewed and
uniform routing.

The model: tools/make_random_moe_model.py --experts 144 --type q8_0 (the Moonlight-16B-A3B
shape with 144 routed experts per layer at Q8_0: ~37 GB, 1.5x a 24 GB machine), written to
--dir when missing and, with --cleanup, deleted after its rows (two such files rarely fit on
disk together). Each engine starts from a cold page cache (`echo 1 > /proc/sys/vm/drop_caches`,
as root; otherwise said in the output), then decodes --gen tokens --reps times after one
warm-up token (bench/llamacpp_bench.py for llama.cpp, `tachyon bench` for tachyon).

    .venv/bin/python bench/experts_beyond_ram.py --dir /work/bigmodels [--experts 144]
        [--experts-mem 0.5 (of RAM)] [--gen 32] [--reps 2] [--routing skewed,uniform] [--cleanup]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def ram_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def make_model(directory: Path, experts: int, routing: str) -> Path:
    result = subprocess.run([str(ROOT / ".venv/bin/python"), str(ROOT / "tools/make_random_moe_model.py"),
                             "--experts", str(experts), "--type", "q8_0", "--routing", routing,
                             "--out", str(directory)],
                            capture_output=True, text=True, check=True)
    return Path(result.stdout.strip().splitlines()[-1])


def tachyon_row(model: Path, memory: int, gen: int, reps: int, threads: int) -> dict:
    result = subprocess.run([str(ROOT / "build/tachyon"), "bench", "-m", str(model), "-p", "0",
                             "-n", str(gen), "-r", str(reps), "-t", str(threads), "--no-roofline",
                             "--experts-mem", str(memory), "--json"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    entries = {entry["test"]: entry for entry in json.loads(result.stdout)}
    return {"tokens_per_second": entries[f"tg{gen}"]["tokens_per_second"],
            "samples": entries[f"tg{gen}"]["samples"],
            "cache": entries["experts"]["cache"],
            "imbalance": entries["experts"]["mean_imbalance"],
            "anonymous_resident_bytes": entries["memory"]["anonymous_resident_bytes"]}


def llamacpp_row(model: Path, gen: int, reps: int, threads: int) -> dict:
    python = ROOT / ".venv-llamacpp/bin/python"
    result = subprocess.run([str(python), str(ROOT / "bench/llamacpp_bench.py"), "-m", str(model),
                             "-p", "0", "-n", str(gen), "-r", str(reps), "-t", str(threads),
                             "--json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    entries = json.loads(result.stdout)
    entry = next(e for e in entries if e["test"] == f"tg{gen}")
    return {"tokens_per_second": entry["tokens_per_second"], "samples": entry.get("samples", [])}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--experts", type=int, default=144)
    parser.add_argument("--experts-mem", type=float, default=0.5, help="fraction of RAM")
    parser.add_argument("--gen", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--routing", default="skewed,uniform")
    parser.add_argument("--engines", default="tachyon,llama.cpp")
    parser.add_argument("--cleanup", action="store_true")
    args = parser.parse_args()
    memory = int(ram_bytes() * args.experts_mem)
    rows = []
    for routing in args.routing.split(","):
        model = make_model(args.dir, args.experts, routing)
        size = model.stat().st_size
        print(f"# {model.name}: {size / 1e9:.1f} GB, {size / ram_bytes():.2f}x RAM; "
              f"--experts-mem {memory / 2**30:.1f} GiB", file=sys.stderr, flush=True)
        row = {"routing": routing, "file_bytes": size, "ram_bytes": ram_bytes(),
               "experts_mem_bytes": memory}
        for engine in args.engines.split(","):
            row[f"{engine}_cold_start"] = drop_page_cache()
            row[engine] = (tachyon_row(model, memory, args.gen, args.reps, args.threads)
                           if engine == "tachyon" else
                           llamacpp_row(model, args.gen, args.reps, args.threads))
            print(f"#   {engine}: {json.dumps(row[engine])}", file=sys.stderr, flush=True)
        rows.append(row)
        if args.cleanup:
            model.unlink()
    print(json.dumps(rows, indent=1))
    print("| routing | tachyon tg tokens/s | hit rate | llama.cpp tg tokens/s (mmap) | ratio |")
    print("|---|---|---|---|---|")
    for row in rows:
        t = row.get("tachyon", {})
        l = row.get("llama.cpp", {})
        ratio = (t["tokens_per_second"] / l["tokens_per_second"]
                 if t and l and l["tokens_per_second"] > 0 else float("nan"))
        print(f"| {row['routing']} | {t.get('tokens_per_second', float('nan')):.2f} | "
              f"{t.get('cache', {}).get('hit_rate', float('nan')):.1%} | "
              f"{l.get('tokens_per_second', float('nan')):.2f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
