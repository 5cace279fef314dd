#!/usr/bin/env python3
"""Regenerates tests/golden/quants/: inputs and expected f32 values for dequantize tests.

Expected values come from the PyPI `gguf` package (numpy), independent of tachyon's C++:
  - types gguf can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16): f32 data with zeros,
    negatives, tiny and large magnitudes is quantized with gguf.quants.quantize, plus a few
    blocks of random bytes; all are dequantized with gguf.quants.dequantize.
  - types gguf only dequantizes (Q2_K ... Q6_K): random block bytes with finite f16 scales,
    dequantized with gguf.quants.dequantize.
  - Q8_K: gguf has no Q8_K class at all, so its expected values are computed here with numpy
    from the layout (x = d * q, one f32 multiply), stated in one line below.
  - F32, F16: raw edge values (+-0, subnormals, inf, NaN with payloads), converted by numpy.

File format (<TYPE>.bin, all little-endian):
  offset  0: char[4]  magic "TQDQ"
  offset  4: uint32   format version, 1
  offset  8: uint32   ggml type id (as in GGUF)
  offset 12: uint32   reserved, 0
  offset 16: uint64   num_elements
  offset 24: uint64   num_bytes of block data
  offset 32: uint8[num_bytes]      the encoded blocks, as stored in a GGUF tensor
  then:      float32[num_elements] the expected dequantized values

half_tables.txt holds a 64-bit FNV-1a hash of numpy's f32 bits for all 65536 f16 (and bf16)
inputs in order 0..65535, so the test can check every half without a 400 KB table.

Run: .venv/bin/python tools/make_quant_golden.py  (deterministic; rerun after a gguf upgrade)
"""

from __future__ import annotations

import importlib.metadata
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as QType

MAGIC = b"TQDQ"
VERSION = 1
SEED = 20240611
OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden" / "quants"

rng = np.random.default_rng(SEED)


def write_golden(qtype: QType, raw: np.ndarray, expected: np.ndarray) -> None:
    raw = np.ascontiguousarray(raw, dtype=np.uint8).ravel()
    expected = np.ascontiguousarray(expected, dtype="<f4").ravel()
    block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
    assert raw.size % block_bytes == 0
    assert expected.size == raw.size // block_bytes * block_elements
    header = MAGIC + struct.pack("<IIIQQ", VERSION, int(qtype), 0, expected.size, raw.size)
    path = OUT_DIR / f"{qtype.name}.bin"
    path.write_bytes(header + raw.tobytes() + expected.tobytes())
    print(f"{path.name:10s} {expected.size:5d} elements {path.stat().st_size:6d} bytes")


def f16_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float16).view(np.uint16)


def test_values(num_blocks: int, block_elements: int) -> np.ndarray:
    """f32 data whose blocks cover the cases quantizers get wrong."""
    blocks = rng.standard_normal((num_blocks, block_elements)).astype(np.float32)
    blocks[0] = 0.0                                     # all zero: scale 0
    blocks[1] = np.abs(blocks[1])                       # all positive
    blocks[2] = -np.abs(blocks[2])                      # all negative
    blocks[3] *= np.float32(3e-6)                       # tiny: subnormal f16 scale
    blocks[4] *= np.float32(5000.0)                     # large (scales stay finite in f16)
    blocks[5, ::3] = 0.0                                # zeros mixed in
    blocks[6] = rng.uniform(-1, 1, block_elements) * np.float32(1e-3)
    blocks[6, 5] = np.float32(2.0)                      # one outlier dominates the scale
    blocks[7] = np.float32(0.3)                         # constant block
    blocks[7, 0] = np.float32(-0.7)
    return blocks.ravel()


def random_blocks(qtype: QType, num_blocks: int) -> np.ndarray:
    """Random block bytes whose f16 scale fields are replaced by realistic finite values."""
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (num_blocks, block_bytes), dtype=np.uint8)
    # Byte offsets of the f16 scale fields in each layout.
    scale_offsets = {
        QType.Q4_0: [0], QType.Q4_1: [0, 2], QType.Q5_0: [0], QType.Q5_1: [0, 2],
        QType.Q8_0: [0], QType.Q2_K: [80, 82], QType.Q3_K: [108], QType.Q4_K: [0, 2],
        QType.Q5_K: [0, 2], QType.Q6_K: [208],
    }[qtype]
    for offset in scale_offsets:
        # Log-uniform magnitudes like real weights' scales, mostly positive.
        magnitude = 10.0 ** rng.uniform(-5, -1, num_blocks)
        sign = np.where(rng.random(num_blocks) < 0.85, 1.0, -1.0)
        values = (magnitude * sign).astype(np.float16)
        values[0] = np.float16(6.0e-8)   # smallest f16 subnormal
        values[-1] = np.float16(0.0)
        raw[:, offset:offset + 2] = values.view(np.uint8).reshape(num_blocks, 2)
    return raw.ravel()


def quantizable(qtype: QType) -> bool:
    block_elements, _ = GGML_QUANT_SIZES[qtype]
    try:
        gguf.quants.quantize(np.zeros(block_elements, dtype=np.float32), qtype)
        return True
    except NotImplementedError:
        return False


def make_block_type(qtype: QType) -> None:
    block_elements, _ = GGML_QUANT_SIZES[qtype]
    parts = []
    if quantizable(qtype):
        parts.append(gguf.quants.quantize(test_values(8, block_elements), qtype).ravel())
        parts.append(random_blocks(qtype, 4))
        how = "quantized + random blocks"
    else:
        parts.append(random_blocks(qtype, 8))
        how = "random blocks"
    raw = np.concatenate(parts)
    expected = gguf.quants.dequantize(raw, qtype)
    assert expected.dtype == np.float32 and np.all(np.isfinite(expected)), qtype.name
    print(f"  {qtype.name}: {how}")
    write_golden(qtype, raw, expected)


def make_q8_k() -> None:
    # block_q8_K: f32 d, int8 qs[256], int16 bsums[16] (sum of each 16 qs).
    num_blocks = 8
    d = (10.0 ** rng.uniform(-4, 0, num_blocks)).astype("<f4")
    d[1] = -d[1]
    d[2] = np.float32(0.0)
    d[3] = np.float32(1e-40)  # f32 subnormal scale
    qs = rng.integers(-128, 128, (num_blocks, 256), dtype=np.int8)
    qs[0, :2] = [-128, 127]
    bsums = qs.astype(np.int16).reshape(num_blocks, 16, 16).sum(axis=-1).astype("<i2")
    raw = np.concatenate(
        [d.view(np.uint8).reshape(num_blocks, 4), qs.view(np.uint8),
         bsums.view(np.uint8).reshape(num_blocks, 32)], axis=1)
    expected = d.reshape(num_blocks, 1) * qs.astype(np.float32)  # x = d * q in f32
    print("  Q8_K: random blocks, expected from numpy (gguf has no Q8_K)")
    write_golden(QType.Q8_K, raw, expected)


# Edge bit patterns shared by f16 and bf16 (same sign/exponent positions for these).
F16_EDGES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0200, 0x0400, 0x3c00, 0xbc00, 0x3555,
             0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7fff, 0x0155]
BF16_EDGES = [0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x7f7f, 0xff7f,
              0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fff, 0x4049, 0xc2f7]


def make_halves() -> None:
    bits = np.concatenate([np.array(F16_EDGES, dtype=np.uint16),
                           rng.integers(0, 65536, 108, dtype=np.uint16)])
    write_golden(QType.F16, bits.view(np.uint8),
                 gguf.quants.dequantize(bits.view(np.uint8), QType.F16))
    bits = np.concatenate([np.array(BF16_EDGES, dtype=np.uint16),
                           rng.integers(0, 65536, 110, dtype=np.uint16)])
    write_golden(QType.BF16, bits.view(np.uint8),
                 gguf.quants.dequantize(bits.view(np.uint8), QType.BF16))


def make_f32() -> None:
    values = np.concatenate([
        np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 1e-45, -1e-45, 1.17549435e-38,
                  3.4028235e38, -3.4028235e38, np.pi], dtype=np.float32),
        rng.standard_normal(52).astype(np.float32) * np.float32(100.0)])
    bits = values.view(np.uint32)
    bits = np.concatenate([bits, np.array([0x7fc00000, 0xffc00001, 0x7f800001], np.uint32)])
    raw = bits.astype("<u4").view(np.uint8)
    write_golden(QType.F32, raw, gguf.quants.dequantize(raw, QType.F32))


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def make_half_tables() -> None:
    every = np.arange(65536, dtype=np.uint32).astype("<u2").view(np.uint8)
    f16 = gguf.quants.dequantize(every, QType.F16).astype("<f4").tobytes()
    bf16 = gguf.quants.dequantize(every, QType.BF16).astype("<f4").tobytes()
    path = OUT_DIR / "half_tables.txt"
    path.write_text(
        "# FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3) over the little-endian\n"
        "# f32 bytes that numpy gives for every 16-bit input 0..65535, in order.\n"
        "# Written by tools/make_quant_golden.py.\n"
        f"f16 {fnv1a64(f16):016x}\n"
        f"bf16 {fnv1a64(bf16):016x}\n")
    print(f"{path.name}: f16 {fnv1a64(f16):016x} bf16 {fnv1a64(bf16):016x}")


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    print(f"gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}")
    make_f32()
    make_halves()
    for qtype in [QType.Q4_0, QType.Q4_1, QType.Q5_0, QType.Q5_1, QType.Q8_0, QType.Q2_K,
                  QType.Q3_K, QType.Q4_K, QType.Q5_K, QType.Q6_K]:
        make_block_type(qtype)
    make_q8_k()
    make_half_tables()


if __name__ == "__main__":
    main()
