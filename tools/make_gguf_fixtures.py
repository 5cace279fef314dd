#!/usr/bin/env python3
"""Writes small GGUF files with the PyPI `gguf` package (an implementation we did not write) and
a JSON description of what they hold, read back with gguf's own GGUFReader. tachyon's reader
test parses the same files and compares.

    .venv/bin/python tools/make_gguf_fixtures.py tests/golden/gguf
"""
import json
import sys
from pathlib import Path

import gguf
import numpy as np


def write_fixture(path: Path, alignment: int | None) -> None:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_name("fixture")
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 65000)
    writer.add_int16("test.i16", -32000)
    writer.add_uint32("test.u32", 4_000_000_000)
    writer.add_int32("test.i32", -2_000_000_000)
    writer.add_uint64("test.u64", 18_000_000_000_000_000_000)
    writer.add_int64("test.i64", -9_000_000_000_000_000_000)
    writer.add_float32("test.f32", 0.15625)
    writer.add_float64("test.f64", -1.0e300)
    writer.add_bool("test.bool_true", True)
    writer.add_bool("test.bool_false", False)
    writer.add_string("test.string", "héllo ✓ 世界\n\"quoted\"")
    writer.add_string("test.empty_string", "")
    writer.add_array("test.array_i32", [1, -2, 3])
    writer.add_array("test.array_f32", [0.5, -1.25])
    writer.add_array("test.array_string", ["a", "", "ü"])
    writer.add_array("test.array_bool", [True, False, True])
    writer.add_array("test.array_empty", [])
    writer.add_array("test.array_nested", NESTED["test.array_nested"])
    writer.add_array("test.array_nested_strings", NESTED["test.array_nested_strings"])
    writer.add_uint32("llama.block_count", 1)
    writer.add_uint32("llama.context_length", 128)

    rng = np.random.default_rng(7)
    writer.add_tensor("f32_matrix", rng.standard_normal((3, 5)).astype(np.float32))
    writer.add_tensor("f16_vector", rng.standard_normal(7).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32),
                              gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8_matrix", q8, raw_shape=q8.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("i32_scalarish", np.array([42], dtype=np.int32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


NESTED = {"test.array_nested": [[1, 2], [3], [4, 5, 6]],
          "test.array_nested_strings": [["x", "y"], ["z"]]}


def field_value(name, field):
    """The value of a metadata field as plain JSON. GGUFReader flattens arrays of arrays, so for
    those the value is the one this script wrote."""
    if name in NESTED:
        return NESTED[name]
    return field.contents()


def describe(path: Path) -> dict:
    reader = gguf.GGUFReader(str(path))
    metadata = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        metadata[name] = {"types": [t.name for t in field.types], "value": field_value(name, field)}
    tensors = []
    for tensor in reader.tensors:
        tensors.append({
            "name": tensor.name,
            "type": tensor.tensor_type.name,
            "shape": [int(d) for d in tensor.shape],
            "num_elements": int(tensor.n_elements),
            "num_bytes": int(tensor.n_bytes),
            "file_offset": int(tensor.data_offset),
            "first_bytes": [int(b) for b in np.asarray(tensor.data).view(np.uint8).reshape(-1)[:8]],
        })
    return {"version": int(reader.fields["GGUF.version"].contents()),
            "alignment": int(reader.alignment), "metadata": metadata, "tensors": tensors}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/gguf")
    out.mkdir(parents=True, exist_ok=True)
    write_fixture(out / "fixture_v3.gguf", alignment=None)
    write_fixture(out / "fixture_v3_align64.gguf", alignment=64)
    # Version 2 has the same little-endian layout as version 3: rewrite the version field.
    data = bytearray((out / "fixture_v3.gguf").read_bytes())
    data[4:8] = (2).to_bytes(4, "little")
    (out / "fixture_v2.gguf").write_bytes(bytes(data))
    for name in ["fixture_v3", "fixture_v3_align64", "fixture_v2"]:
        description = describe(out / f"{name}.gguf")
        (out / f"{name}.json").write_text(json.dumps(description, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote fixtures to {out}")


if __name__ == "__main__":
    main()
