#!/usr/bin/env python3
"""tests/golden/quantizers_k/manifest.json: llama.cpp's own Q4_K and Q6_K quantization (no
importance matrix, every matrix in the one type: llama_model_quantize with `pure`) of a small
random F32 model with 256-wide rows, recorded as each tensor's sha256, for
DecoderModelTest.QuantizeAtLoadToKQuantsMatchesLlamaCpp (tachyon's --quantize q4_k / q6_k must
give the same bytes). The gguf package has no K-quant quantizer, so llama.cpp is the reference.

Three steps, two interpreters (the GGUF from the test venv, the quantizing from llama.cpp's
binding, built by bench/build_llama_server.sh):

    .venv/bin/python tools/make_quantizer_k_golden.py write /tmp/kq
    PYTHONPATH=.peers/llama-server/src LLAMA_CPP_LIB_PATH=.peers/llama-server/build/bin \\
        .peers/venv/bin/python tools/make_quantizer_k_golden.py quantize /tmp/kq
    .venv/bin/python tools/make_quantizer_k_golden.py record /tmp/kq
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "llama_k_quant"
TYPES = {"q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_S", "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K"}


def write(out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import tiny_models
    tiny_models.write_model(NAME, "f32", out / f"{NAME}.f32.gguf")


def quantize(out: Path) -> None:
    import llama_cpp
    for name, ftype in TYPES.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, ftype)
        params.pure = True
        params.nthread = 1
        source = str(out / f"{NAME}.f32.gguf").encode()
        target = str(out / f"{NAME}.{name}.llamacpp.gguf").encode()
        if llama_cpp.llama_model_quantize(source, target, params) != 0:
            sys.exit(f"llama_model_quantize to {name} failed")


def record(out: Path) -> None:
    import gguf
    entries = {}
    for name in TYPES:
        reader = gguf.GGUFReader(str(out / f"{NAME}.{name}.llamacpp.gguf"))
        tensors = {}
        for tensor in reader.tensors:
            if len(tensor.shape) < 2:
                continue
            tensors[tensor.name] = {"type": tensor.tensor_type.name,
                                    "sha256": hashlib.sha256(bytes(tensor.data)).hexdigest()}
        entries[name] = tensors
    f32 = (out / f"{NAME}.f32.gguf").read_bytes()
    manifest = {"generator": "tools/make_quantizer_k_golden.py", "model": NAME,
                "f32_gguf_sha256": hashlib.sha256(f32).hexdigest(),
                "reference": "llama.cpp via llama-cpp-python (llama_model_quantize, pure, no "
                             "imatrix)",
                "quantized": entries}
    target = ROOT / "tests/golden/quantizers_k/manifest.json"
    target.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    step, directory = sys.argv[1], Path(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    {"write": write, "quantize": quantize, "record": record}[step](directory)
