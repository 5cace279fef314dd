#!/usr/bin/env python3
"""Dump llama.cpp's intermediate tensors (f32 copies) for one prompt, to find where tachyon's
arithmetic and llama.cpp's part ways (issue 3: free-running greedy identity). Names are
llama.cpp's graph names: attn_norm-L, Qcur-L (after RoPE), Kcur-L, Vcur-L, kqv_out-L (attention
output before the output projection), attn_out-L, ffn_inp-L, ffn_norm-L, ffn_gate-L, ffn_up-L,
ffn_swiglu-L, ffn_out-L, l_out-L, result_norm, result_output; plus logits@<position>.

    .venv-llamacpp/bin/python tools/dump_llamacpp_tensors.py --tokens 1,2,3 --out /tmp/dump \
        [--model M.gguf] [--threads 2] [--decode-one-by-one]

Every tensor llama.cpp's graph evaluates is written as OUT/<name>.npy (shape as numpy sees the
row-major data: ggml's ne reversed). With --decode-one-by-one the prompt is fed a token at a
time (the path greedy decoding takes after the prompt), and files get a "@<position>" suffix.
"""
from __future__ import annotations

import argparse
import ctypes
from pathlib import Path

import numpy as np

import llama_cpp.llama_cpp as L

DEFAULT_MODEL = Path.home() / ".cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf"
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1


class GgmlTensor(ctypes.Structure):  # ggml.h, struct ggml_tensor (GGML_MAX_DIMS 4, MAX_SRC 10)
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p),
                ("padding", ctypes.c_char * 8)]


def tensor_to_numpy(t: GgmlTensor) -> np.ndarray | None:
    if t.type not in (GGML_TYPE_F32, GGML_TYPE_F16) or not t.data:
        return None
    dtype = np.float32 if t.type == GGML_TYPE_F32 else np.float16
    ne = [t.ne[i] for i in range(4)]
    nb = [t.nb[i] for i in range(4)]
    size = max((ne[i] - 1) * nb[i] for i in range(4)) + np.dtype(dtype).itemsize
    raw = (ctypes.c_char * size).from_address(t.data)
    flat = np.frombuffer(raw, dtype=dtype, count=size // np.dtype(dtype).itemsize)
    array = np.lib.stride_tricks.as_strided(flat, shape=ne[::-1], strides=nb[::-1])
    return np.array(array, dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--tokens", required=True, help="comma-separated token ids")
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decode-one-by-one", action="store_true")
    parser.add_argument("--graph", action="store_true",
                        help="also print each graph node: op, type, shape, sources")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokens = [int(t) for t in args.tokens.split(",")]

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(args.model.encode(), mp)
    suffix = [""]

    @L.ggml_backend_sched_eval_callback
    def on_tensor(tensor_pointer, ask, user_data):
        if ask:
            return True
        t = GgmlTensor.from_address(tensor_pointer)
        array = tensor_to_numpy(t)
        name = t.name.decode(errors="replace").replace("/", "_")
        if args.graph and not suffix[0].endswith("@1"):
            sources = [GgmlTensor.from_address(s).name.decode(errors="replace")
                       for s in t.src if s]
            print(f"{name:<24} op={L.ggml_op_name(t.op).decode() if hasattr(L, 'ggml_op_name') else t.op:<14} "
                  f"type={t.type} ne={[t.ne[i] for i in range(4)]} op_params={list(t.op_params)[:4]} "
                  f"src={sources}")
        if array is not None:
            np.save(out / f"{name}{suffix[0]}.npy", array)
        return True

    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 1024, 512, 512, 1
    cp.n_threads = cp.n_threads_batch = args.threads
    cp.cb_eval = on_tensor
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(512, 0, 1)
    chunks = [[t] for t in tokens] if args.decode_one_by_one else [tokens]
    position = 0
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    for chunk in chunks:
        for i, token in enumerate(chunk):
            batch.token[i], batch.pos[i] = token, position + i
            batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = 1, 0, 1
        batch.n_tokens = len(chunk)
        suffix[0] = f"@{position}" if args.decode_one_by_one else ""
        if L.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        for i in range(len(chunk)):
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,))
            np.save(out / f"logits@{position + i}.npy", logits.copy())
        position += len(chunk)
    print(f"wrote {len(list(out.glob('*.npy')))} tensors to {out}")


if __name__ == "__main__":
    main()
