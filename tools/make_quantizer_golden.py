#!/usr/bin/env python3
"""Regenerates tests/golden/quantizers/: f32 weights (input.f32, 64 blocks of 32) and what the
PyPI `gguf` package's quantizers (gguf.quants.quantize, bit-exact with ggml's reference ones)
make of them, <TYPE>.bin for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0. tachyon's quantize_weights must
write the same bytes (tests/kernels/quantize_weights_test.cpp).

    .venv/bin/python tools/make_quantizer_golden.py tests/golden/quantizers
"""
import sys
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType as QType
from gguf.quants import quantize

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")


def weights() -> np.ndarray:
    rng = np.random.default_rng(2026)
    blocks = [rng.standard_normal(32) * scale for scale in
              (1.0, 0.02, 3e-4, 50.0, 1e-6, 1.0, 0.3, 7.0) for _ in range(6)]
    blocks.append(np.zeros(32))                                  # d = 0
    blocks.append(np.arange(32) - 15.5)                          # exact halves
    blocks.append(np.arange(32) * 127.0 / 31 - 63.5)             # ties after scaling
    blocks.append(-np.abs(rng.standard_normal(32)))              # all negative
    blocks.append(np.abs(rng.standard_normal(32)) + 1)           # all positive, min > 0
    blocks.append(np.full(32, 0.75))                             # max == min
    blocks.append(np.where(np.arange(32) % 2 == 0, 1.0, -1.0))   # max and -max both present
    blocks.append(rng.standard_normal(32) * 6e4)                 # near f16's largest
    blocks += [rng.standard_normal(32) for _ in range(64 - len(blocks))]
    return np.concatenate(blocks).astype(np.float32)


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = weights()
    assert data.size == 64 * 32
    (out / "input.f32").write_bytes(data.astype("<f4").tobytes())
    for name in TYPES:
        encoded = quantize(data.reshape(4, -1), QType[name])
        (out / f"{name}.bin").write_bytes(encoded.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
