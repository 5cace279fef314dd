#!/usr/bin/env python3
"""Writes a Q4_K_M (or Q5_K_M) file of the Llama-3.2-1B shape, quantized by llama.cpp's own
quantizer (llama-cpp-python) from the random Q8_0 model that tools/make_random_model.py
writes, for the K-quant rows of issue 6's table: Q4_K_M files are what most users download.
llama.cpp picks each matrix's type as it does for real models (the 1B shape's Q4_K_M: 96 Q4_K
and 17 Q6_K matrices).

    .venv-llamacpp/bin/python tools/make_k_quant_model.py [--type Q4_K_M|Q5_K_M] [--out DIR]

Makes the Q8_0 source first if missing (with .venv's python). Writes
DIR/random-llama-3.2-1b-shape.<TYPE>.gguf (default DIR: $TACHYON_HOME/models, ~0.8 GB) and
prints its path; an existing file is kept.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parents[1]
FTYPES = {"Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
          "Q5_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--type", choices=sorted(FTYPES), default="Q4_K_M")
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("TACHYON_HOME",
                                                    Path.home() / ".cache/tachyon")) / "models")
    args = parser.parse_args()
    out = args.out / f"random-llama-3.2-1b-shape.{args.type}.gguf"
    if not out.exists():
        made = subprocess.run([str(ROOT / ".venv/bin/python"), "tools/make_random_model.py",
                               "--type", "Q8_0", "--out", str(args.out)],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        source = made.stdout.strip().splitlines()[-1]
        params = llama_cpp.llama_model_quantize_default_params()
        params.allow_requantize = True  # the source is already quantized (Q8_0)
        params.ftype = FTYPES[args.type]
        partial = out.with_suffix(".partial")
        status = llama_cpp.llama_model_quantize(source.encode(), str(partial).encode(),
                                                ctypes.byref(params))
        if status != 0:
            print(f"llama_model_quantize failed ({status})", file=sys.stderr)
            return 1
        partial.rename(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
