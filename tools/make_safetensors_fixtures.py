#!/usr/bin/env python3
"""Writes small safetensors files with the PyPI `safetensors` package (the format's reference
implementation, which we did not write) and a JSON description of what they hold, read back with
its own `deserialize`: each tensor's dtype, shape and the sha256 of its bytes, and the metadata.
tachyon's reader test parses the same files and compares. Also a model folder sharded as
Hugging Face writes it (model.safetensors.index.json naming each tensor's shard).

    .venv/bin/python tools/make_safetensors_fixtures.py tests/golden/safetensors \
        [--seeds fuzz/seeds/fuzz_safetensors_reader]

--seeds also copies the files there, as the fuzz target's seed corpus.
"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import safetensors
from safetensors import TensorSpec


def spec(dtype: str, array: np.ndarray, keep: list) -> TensorSpec:
    """A tensor of `dtype` (the package's name for it) whose bytes are `array`'s."""
    if not array.flags.c_contiguous:  # (ascontiguousarray would make a scalar 1-d)
        array = np.ascontiguousarray(array)
    keep.append(array)
    return TensorSpec(dtype=dtype, shape=list(array.shape), data_ptr=array.ctypes.data,
                      data_len=array.nbytes)


def describe(data: bytes) -> dict:
    """What the reference reads back from serialized bytes."""
    tensors = []
    for name, tensor in safetensors.deserialize(data):
        tensors.append({"name": name, "dtype": tensor["dtype"], "shape": list(tensor["shape"]),
                        "num_bytes": len(tensor["data"]),
                        "sha256": hashlib.sha256(bytes(tensor["data"])).hexdigest()})
    return {"tensors": sorted(tensors, key=lambda t: t["name"])}


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    keep: list = []
    # Every dtype the format has, odd shapes, a scalar and an empty tensor.
    tensors = {
        "model.embed_tokens.weight": spec("float32", rng.standard_normal((5, 3), np.float32), keep),
        "layers.0.q.weight": spec("float16", rng.standard_normal((4, 2)).astype(np.float16), keep),
        "layers.0.k.weight": spec("bfloat16", rng.integers(0, 65535, (3, 2), np.uint16), keep),
        "layers.0.mlp.weight": spec("float8_e4m3fn", rng.integers(0, 255, (4, 8), np.uint8),
                                    keep),
        "layers.0.mlp.weight_scale_inv": spec("float32", np.float32([[0.5]]), keep),
        "e5m2": spec("float8_e5m2", rng.integers(0, 255, (3,), np.uint8), keep),
        "f64.scalar": spec("float64", np.array(3.25, np.float64), keep),
        "i64": spec("int64", np.int64([[-1, 2], [3, -4]]), keep),
        "i32.empty": spec("int32", np.zeros((0, 3), np.int32), keep),
        "u32": spec("uint32", np.uint32([1, 4000000000]), keep),
        "i16": spec("int16", np.int16([-3, 7, 9]), keep),
        "u16": spec("uint16", np.uint16([65535]), keep),
        "u64": spec("uint64", np.uint64([2**63 + 5]), keep),
        "i8": spec("int8", np.int8([-128, 127, 0]), keep),
        "u8": spec("uint8", np.uint8([255, 0]), keep),
        "mask": spec("bool", np.array([True, False, True]), keep),
    }
    data = bytes(safetensors.serialize(tensors, metadata={"format": "pt", "note": "fixture"}))
    (out / "fixture.safetensors").write_bytes(data)
    description = describe(data)
    description["metadata"] = {"format": "pt", "note": "fixture"}
    (out / "fixture.json").write_text(json.dumps(description, indent=1) + "\n")

    # A folder sharded as transformers' save_pretrained writes it.
    folder = out / "sharded"
    folder.mkdir(exist_ok=True)
    shards = {
        "model-00001-of-00002.safetensors": {
            "model.embed_tokens.weight": rng.standard_normal((6, 4), np.float32),
            "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((4, 4), np.float32),
        },
        "model-00002-of-00002.safetensors": {
            "model.layers.0.mlp.down_proj.weight": rng.standard_normal((4, 8), np.float32),
            "model.norm.weight": np.ones(4, np.float32),
        },
    }
    weight_map = {}
    total = 0
    for shard, arrays in shards.items():
        specs = {name: spec("float32", array, keep) for name, array in arrays.items()}
        (folder / shard).write_bytes(bytes(safetensors.serialize(specs, metadata={"format": "pt"})))
        for name, array in arrays.items():
            weight_map[name] = shard
            total += array.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4,
              "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "vocab_size": 6, "rms_norm_eps": 1e-5,
              "torch_dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    if len(sys.argv) > 3 and sys.argv[2] == "--seeds":
        seeds = Path(sys.argv[3])
        seeds.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "fixture.safetensors", seeds)
        for shard in shards:
            shutil.copy(folder / shard, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
