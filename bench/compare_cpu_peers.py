#!/usr/bin/env python3
"""Issue 6's table: tachyon against both CPU peers, llama.cpp mainline (llama-cpp-python) and
ik_llama.cpp (ik-llama-cpp-python), on the same machine and thread count, the engines taking
turns test by test so that noise from a shared machine hits all three. Prints a Markdown
table (docs/benchmarks.md) with each test's tokens/s (median of -r repetitions, then the
median over --rounds), tachyon's ratio to the faster peer, and for decode tests the fraction of
tachyon bench's measured roofline (each tg repetition against the read bandwidth probed right
before and after it).

    .venv/bin/python bench/compare_cpu_peers.py [-t 2] [-r 5] [--rounds 1] [--long]
        [--only MODEL] [--tests pp8192,...] [--peers ik_llama.cpp] [--interleave]
        [--level avx2]

--interleave runs one repetition per engine call and the engines take turns repetition by
repetition (each call loads the model again): these machines' read bandwidth changes from
minute to minute, and turns of a few seconds let every engine see the same phases.

Models (made first if missing): the default SmolLM2-135M Q4_1 and its Q8_0 / F16 variants
(tools/make_model_variant.py), random weights in the Llama-3.2-1B shape in Q4_0 and Q8_0
(tools/make_random_model.py) and in Q4_K_M (tools/make_k_quant_model.py, llama.cpp's quantizer
from the Q8_0 one). --long adds pp8192 on the default model (minutes per engine).
Needs build/tachyon, .venv-llamacpp (tools/requirements-llamacpp.txt) and .venv-ikllama
(tools/requirements-ikllama.txt).

--level avx2 (issue 21's AVX2 table): tachyon with TACHYON_CPU_LEVEL=avx2 against both peers
built for AVX2 + FMA + F16C only, no AVX-512, VNNI or AMX (bench/build_llama_server.sh avx2 and
bench/build_ik_llama.sh avx2, which this script runs if their libraries are missing: ~25 and
~35 min on 2 cores), through the same bench scripts with the bindings' Python packages from
their sdists and the libraries chosen by LLAMA_CPP_LIB_PATH / IK_LLAMA_CPP_LIB_PATH, in
.peers/venv (numpy, diskcache, jinja2, typing_extensions).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_llamacpp import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon")) / "models"
DEFAULT = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"  # scripts/fetch_model.sh gemma3 (make setup)


PEERS = ROOT / ".peers"
PEER_PYTHON = PEERS / "venv/bin/python"


def built_library(script: str, level: str = "avx2") -> Path:
    """A build of a peer (AVX2-only unless `level` says), built first if missing (the script
    prints its path)."""
    out = subprocess.run([str(ROOT / "bench" / script), level], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return Path(out.stdout.strip().splitlines()[-1])


def avx2_peer_environments() -> dict[str, dict[str, str]]:
    """Environment variables that make the bench scripts load the AVX2-only peers."""
    if not PEER_PYTHON.exists():
        subprocess.run(["python3", "-m", "venv", str(PEERS / "venv")], check=True)
        subprocess.run([str(PEER_PYTHON), "-m", "pip", "install", "--quiet", "numpy",
                        "diskcache", "jinja2", "typing_extensions"], check=True)
    llama_server = built_library("build_llama_server.sh")  # .../build/bin/llama-server
    ik_library = built_library("build_ik_llama.sh")
    return {
        "llama.cpp": {"PYTHONPATH": str(PEERS / "llama-server/src"),
                      "LLAMA_CPP_LIB_PATH": str(llama_server.parent)},
        "ik_llama.cpp": {"PYTHONPATH": str(PEERS / "ik/src"),
                         "IK_LLAMA_CPP_LIB_PATH": str(ik_library)},
    }


def ensure_models(llamacpp_python: list[str], wanted: set[str]) -> dict[str, Path]:
    """The plan's models (`wanted`), made first where missing."""
    def made(*argv: str, python: tuple[str, ...] = (str(ROOT / ".venv/bin/python"),)) -> Path:
        out = subprocess.run([*python, *argv], capture_output=True, text=True, check=True,
                             cwd=ROOT)
        return Path(out.stdout.strip().splitlines()[-1])

    makers = {
        "Gemma 3 270M Q4_K_M": lambda: GEMMA,
        "SmolLM2-135M Q4_1": lambda: DEFAULT,
        "SmolLM2-135M Q8_0": lambda: made("tools/make_model_variant.py", "--type", "Q8_0"),
        "SmolLM2-135M F16": lambda: made("tools/make_model_variant.py", "--type", "F16"),
        "Llama-3.2-1B shape Q4_0": lambda: made("tools/make_random_model.py", "--type", "Q4_0"),
        "Llama-3.2-1B shape Q8_0": lambda: made("tools/make_random_model.py", "--type", "Q8_0"),
        "Llama-3.2-1B shape Q4_K_M": lambda: made("tools/make_k_quant_model.py", "--type",
                                                  "Q4_K_M", python=tuple(llamacpp_python)),
    }
    return {name: make() for name, make in makers.items() if name in wanted}


def run_json(command: list[str], env: dict[str, str]) -> dict[str, dict]:
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, **env})
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed: {result.stderr[-2000:]}")
    return {row["test"]: row for row in json.loads(result.stdout)}


def peer_pythons(level: str) -> dict[str, str]:
    if level == "avx2":
        return {"llama.cpp": str(PEER_PYTHON), "ik_llama.cpp": str(PEER_PYTHON)}
    ik = ROOT / ".venv-ikllama/bin/python"
    return {"llama.cpp": str(ROOT / ".venv-llamacpp/bin/python"),
            "ik_llama.cpp": str(ik if ik.exists() else ROOT / ".venv-llamacpp/bin/python")}


def engines(threads: int, reps: int, level: str) -> dict[str, list[str]]:
    common = ["-t", str(threads), "-r", str(reps), "--json"]
    python = peer_pythons(level)
    return {
        "tachyon": [str(ROOT / "build/tachyon"), "bench", *common],
        "llama.cpp": [python["llama.cpp"], "bench/llamacpp_bench.py", *common],
        "ik_llama.cpp": [python["ik_llama.cpp"], "bench/ikllama_bench.py", *common],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-r", "--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--long", action="store_true", help="also pp8192 on the default model")
    parser.add_argument("--gemma", action="store_true",
                        help="only Gemma 3 270M's long-context tests (issue 26: sliding windows): "
                             "pp8192, pp32768, tg128 and tg128 @ d16384")
    parser.add_argument("--only", help="only the models whose name contains this")
    parser.add_argument("--tests", help="only these tests (comma-separated, e.g. pp8192)")
    parser.add_argument("--peers", default="llama.cpp,ik_llama.cpp",
                        help="peers to run (comma-separated; mainline takes ~2 min per pp8192)")
    parser.add_argument("--interleave", action="store_true",
                        help="engines take turns repetition by repetition, not test by test")
    parser.add_argument("--level", choices=("native", "avx2"), default="native",
                        help="avx2: tachyon forced to AVX2 against peers built AVX2-only")
    args = parser.parse_args()
    environments: dict[str, dict[str, str]] = {"llama.cpp": {}, "ik_llama.cpp": {}}
    if args.level == "avx2":
        environments = avx2_peer_environments()
    environments["tachyon"] = {"TACHYON_CPU_LEVEL": args.level} if args.level == "avx2" else {}
    if args.level == "native" and not (ROOT / ".venv-ikllama/bin/python").exists():
        # No .venv-ikllama: the library bench/build_ik_llama.sh builds, through its sdist's
        # Python package, with the llama.cpp venv's Python (numpy is all it needs).
        environments["ik_llama.cpp"] = {"PYTHONPATH": str(PEERS / "ik/src"),
                                        "IK_LLAMA_CPP_LIB_PATH": str(built_library(
                                            "build_ik_llama.sh", "native"))}
    llamacpp_python = [peer_pythons(args.level)["llama.cpp"]]
    if args.level == "avx2":
        # The K-quant model is made by llama.cpp's quantizer: the native build of the same
        # version, which gives the same bytes.
        llamacpp_python = ["env", f"PYTHONPATH={PEERS / 'llama-server/src'}",
                           f"LLAMA_CPP_LIB_PATH={PEERS / 'llama-server/build/bin'}",
                           str(PEER_PYTHON)]
    # (model, test arguments, the tests they produce)
    plan = [("SmolLM2-135M Q4_1", ["-p", "512", "-n", "128"], ["pp512", "tg128"]),
            ("SmolLM2-135M Q4_1", ["-p", "0", "-n", "0", "--parallel", "32"], ["batched32"]),
            ("SmolLM2-135M Q8_0", ["-p", "512", "-n", "128"], ["pp512", "tg128"]),
            ("SmolLM2-135M F16", ["-p", "512", "-n", "128"], ["pp512", "tg128"]),
            ("Llama-3.2-1B shape Q4_0", ["-p", "512", "-n", "128"], ["pp512", "tg128"]),
            ("Llama-3.2-1B shape Q8_0", ["-p", "512", "-n", "128"], ["pp512", "tg128"]),
            ("Llama-3.2-1B shape Q4_K_M", ["-p", "512", "-n", "128"], ["pp512", "tg128"])]
    if args.long:
        plan.append(("SmolLM2-135M Q4_1", ["-p", "8192", "-n", "0"], ["pp8192"]))
    if args.gemma:
        gemma = "Gemma 3 270M Q4_K_M"
        plan = [(gemma, ["-p", "8192", "-n", "0"], ["pp8192"]),
                (gemma, ["-p", "32768", "-n", "0"], ["pp32768"]),
                (gemma, ["-p", "0", "-n", "128"], ["tg128"]),
                (gemma, ["-p", "0", "-n", "128", "-d", "16384"], ["tg128 @ d16384"])]
    if args.only:
        plan = [item for item in plan if args.only in item[0]]
    if args.tests:
        wanted = set(args.tests.split(","))
        plan = [item for item in plan if wanted & set(item[2])]
    models = ensure_models(llamacpp_python, {model for model, _, _ in plan})
    peers = args.peers.split(",")
    calls = args.reps if args.interleave else 1  # engine calls per test and round
    runners = {engine: command
               for engine, command in engines(args.threads, 1 if args.interleave else args.reps,
                                              args.level).items()
               if engine == "tachyon" or engine in peers}
    rates: dict[tuple[str, str, str], list[float]] = {}
    roofline: dict[str, list[float]] = {}
    roofline_rate: dict[str, list[float]] = {}  # tokens/s the probes around tachyon's tg allow
    for _ in range(args.rounds):
        for model, test_args, tests in plan:
            # This round's repetitions per (test, engine): one call with -r reps, or reps calls
            # of one repetition each, taking turns (--interleave).
            reps: dict[tuple[str, str], list[float]] = {}
            fractions: list[float] = []
            allowed: list[float] = []
            for _ in range(calls):
                for engine, command in runners.items():
                    rows = run_json([*command, "-m", str(models[model]), *test_args],
                                    environments[engine])
                    for test in tests:
                        reps.setdefault((test, engine), []).extend(
                            rows[test].get("samples", [rows[test]["tokens_per_second"]]))
                    if engine == "tachyon" and "roofline" in rows and "tg128" in rows:
                        # Each tg repetition against the bandwidth probed right around it.
                        fractions.append(rows["roofline"]["tg_fraction_of_roofline"])
                        allowed.append(rows["roofline"]["tokens_per_second"])
            for engine in runners:
                for test in tests:
                    rates.setdefault((model, test, engine), []).append(
                        statistics.median(reps[(test, engine)]))
                print(f"  {model} {' '.join(test_args)} {engine}: "
                      f"{ {t: round(statistics.median(reps[(t, engine)]), 1) for t in tests} }",
                      file=sys.stderr)
            if fractions:
                roofline.setdefault(model, []).append(statistics.median(fractions))
                roofline_rate.setdefault(model, []).append(statistics.median(allowed))
    versions = {name: subprocess.run([peer_pythons(args.level)[engine], "-c",
                                      f"import {module}; print({module}.__version__)"],
                                     capture_output=True, text=True,
                                     env={**os.environ, **environments[engine]}).stdout.strip()
                for name, engine, module in (("llama-cpp-python", "llama.cpp", "llama_cpp"),
                                             ("ik-llama-cpp-python", "ik_llama.cpp",
                                              "ik_llama_cpp"))}
    level = " (tachyon forced to AVX2, peers built AVX2-only)" if args.level == "avx2" else ""
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores{level}; threads: {args.threads}; peers: "
          f"llama-cpp-python {versions['llama-cpp-python']} (llama.cpp mainline), "
          f"ik-llama-cpp-python {versions['ik-llama-cpp-python']} (ik_llama.cpp); "
          f"median of {args.reps} repetitions per test"
          f"{' (engines taking turns repetition by repetition)' if args.interleave else ''}, "
          f"median over {args.rounds} round(s)\n")
    print("| model | test | tachyon | llama.cpp | ik_llama.cpp | tachyon / faster peer | "
          "tachyon / roofline | faster peer / roofline |")
    print("|---|---|---|---|---|---|---|---|")
    for model, _, tests in plan:
        for test in tests:
            values = {engine: statistics.median(rates[(model, test, engine)])
                      for engine in runners}
            peer = max(values.get(name, 0.0) for name in ("llama.cpp", "ik_llama.cpp"))
            shown = {name: f"{values[name]:.1f}" if name in values else "-"
                     for name in ("llama.cpp", "ik_llama.cpp")}
            fraction = ""
            peer_fraction = ""
            if test.startswith("tg") and roofline.get(model):
                fraction = f"{100 * statistics.median(roofline[model]):.0f}%"
                # The peer ran minutes apart from tachyon's probes: a rough guide only.
                peer_fraction = f"~{100 * peer / statistics.median(roofline_rate[model]):.0f}%"
            print(f"| {model} | {test} | {values['tachyon']:.1f} | {shown['llama.cpp']} | "
                  f"{shown['ik_llama.cpp']} | {values['tachyon'] / peer:.2f}x | {fraction} | "
                  f"{peer_fraction} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
