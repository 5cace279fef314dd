#!/usr/bin/env python3
"""Writes what the PyPI `ml_dtypes` package (an implementation we did not write) decodes each of
the 256 FP8 E4M3 ("fn") and E5M2 bit patterns to, as f32 bit patterns (NaNs as "nan"), and the
sha256 of a block-scaled dequantization as DeepSeek-V3's code does it (f32 value times its
128x128 block's f32 scale_inv) of a 130x260 matrix whose bytes and scales both sides generate
from the same formula. tests/kernels/fp8_test.cpp compares.

    .venv/bin/python tools/make_fp8_golden.py tests/golden/fp8/fp8.json
"""
import hashlib
import json
import sys

import ml_dtypes
import numpy as np

ROWS, COLS, BLOCK = 130, 260, 128
SCALES = [0.5, 1.25, 3e-3, 7.0, 0.1, 2.0**-20]  # row-major [2, 3]


def bits(values: np.ndarray) -> list:
    return ["nan" if np.isnan(v) else int(np.float32(v).view(np.uint32)) for v in values]


def block_weights() -> np.ndarray:
    """Byte (r * COLS + c) * 37 + 11 mod 256, its NaN patterns (0x7f, 0xff) made 0."""
    index = np.arange(ROWS * COLS, dtype=np.int64)
    weights = ((index * 37 + 11) % 256).astype(np.uint8)
    weights[(weights & 0x7F) == 0x7F] = 0
    return weights.reshape(ROWS, COLS)


def main() -> int:
    patterns = np.arange(256, dtype=np.uint8)
    e4m3 = patterns.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    e5m2 = patterns.view(ml_dtypes.float8_e5m2).astype(np.float32)
    scale = np.float32(SCALES).reshape(2, 3)
    full_scale = np.repeat(np.repeat(scale, BLOCK, axis=0), BLOCK, axis=1)[:ROWS, :COLS]
    values = block_weights().view(ml_dtypes.float8_e4m3fn).astype(np.float32) * full_scale
    golden = {
        "ml_dtypes": ml_dtypes.__version__,
        "e4m3": bits(e4m3),
        "e5m2": bits(e5m2),
        "blocks": {"rows": ROWS, "cols": COLS, "block": BLOCK, "scale_inv": SCALES,
                   "out_f32_sha256": hashlib.sha256(values.astype("<f4").tobytes()).hexdigest()},
    }
    with open(sys.argv[1], "w") as out:
        json.dump(golden, out, separators=(",", ":"))
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
