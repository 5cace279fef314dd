#!/usr/bin/env python3
"""Writes a copy of a GGUF model with its matrices in another type (Q8_0, F16, BF16, Q4_0, ...),
for speed tests of one model in several weight types (issue 6: the default model in Q8_0 and
F16). Uses the PyPI `gguf` package to read, dequantize, quantize and write.

    .venv/bin/python tools/make_model_variant.py --type Q8_0 [--model M.gguf] [--out FILE]

The default model ships as Q4_1 only and its F32 original is not reachable from these machines,
so the variants start from the Q4_1 weights dequantized: the same shapes and types as a
conversion from F32 (which is all speed depends on), not the same numbers. Every 2-D weight
except those gguf cannot requantize (rows not a multiple of the block) is converted; vectors
(norms) stay F32. Metadata is copied, general.file_type updated. An existing output is kept.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

import gguf

HOME = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon"))
DEFAULT_MODEL = HOME / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_TYPES = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
              "BF16": gguf.LlamaFileType.MOSTLY_BF16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
              "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1}


def copy_field(writer: gguf.GGUFWriter, field: gguf.ReaderField) -> None:
    value_type = field.types[0]
    if value_type == gguf.GGUFValueType.ARRAY:
        element_type = field.types[-1]
        values = [field.parts[i] for i in field.data]
        if element_type == gguf.GGUFValueType.STRING:
            writer.add_array(field.name, [bytes(v).decode("utf-8", errors="surrogateescape")
                                          for v in values])
        else:
            writer.add_array(field.name, [v.tolist()[0] for v in values])
        return
    value = field.parts[field.data[0]]
    if value_type == gguf.GGUFValueType.STRING:
        writer.add_string(field.name, bytes(value).decode("utf-8", errors="surrogateescape"))
    else:
        writer.add_key_value(field.name, value.tolist()[0], value_type)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--type", choices=sorted(FILE_TYPES), required=True)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    stem = args.model.name.removesuffix(".gguf")
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    out = args.out or args.model.with_name(f"{stem}.{args.type}-from-{args.model.stem.rsplit('.', 1)[-1]}.gguf")
    if out.exists():
        print(out)
        return 0
    reader = gguf.GGUFReader(str(args.model))
    architecture = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    partial = out.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), arch=architecture)
    target = gguf.GGMLQuantizationType[args.type]
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            writer.add_file_type(FILE_TYPES[args.type])
            continue
        copy_field(writer, field)
    block, _ = gguf.GGML_QUANT_SIZES[target]
    for tensor in reader.tensors:
        shape = [int(n) for n in reversed(tensor.shape.tolist())]  # numpy order: rows first
        weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
        weights = weights.astype(np.float32)
        if len(shape) == 2 and shape[-1] % block == 0:
            if target == gguf.GGMLQuantizationType.F32:
                writer.add_tensor(tensor.name, weights)
            elif target == gguf.GGMLQuantizationType.F16:
                writer.add_tensor(tensor.name, weights.astype(np.float16))
            else:
                packed = gguf.quants.quantize(weights, target)
                writer.add_tensor(tensor.name, packed, raw_shape=packed.shape, raw_dtype=target)
        else:
            writer.add_tensor(tensor.name, weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
