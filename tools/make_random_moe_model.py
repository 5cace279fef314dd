#!/usr/bin/env python3
"""Writes a GGUF model with random weights in the Moonlight-16B-A3B shape (deepseek2: 27 layers,
the first dense; MLA with 16 heads, no q_lora, kv_lora 512, 128 + 64 query/key dims and 128
value dims per head; 64 routed experts of 1408, 6 per token, sigmoid scores with a selection
bias, 2 shared experts; vocabulary 163840), for the first MoE speed rows of docs/benchmarks.md.
Its numbers mean nothing, only its shape and weight types do.

    .venv/bin/python tools/make_random_moe_model.py [--out DIR]

Weight types as llama.cpp's Q4_K_M gives this shape: Q4_K matrices, Q6_K for the output and
the dense FFN's down matrix, and llama.cpp's fallbacks where rows are no multiple of 256
(attn_k_b's 128-wide rows: Q8_0; the experts' 1408-wide down rows: Q5_0); the router, the
selection bias and the norms F32. The blocks are random bytes with small scales written
directly (quantizing 16B random floats first would need tens of GB), valid for every engine.
The tokenizer is GPT-2's byte-level BPE padded with reserved control tokens, as
tools/make_random_model.py does. Writes DIR/random-moonlight-16b-a3b-shape.Q4_K_M.gguf (default
DIR: $TACHYON_HOME/models, ~9.5 GB, about a minute) and prints its path; an existing file is
kept.

    --shape v2-lite    the DeepSeek-V2-Lite shape (27 layers, softmax routing without a selection
                       bias, vocabulary 102400; ~9.5 GB at Q4_K_M); uniform routing only
    --shape small      the same architecture at 1024 wide, 4 layers, 50304 tokens (~270 MB, 180 MB
                       of it routed experts): the --experts-mem memory test's model
    --routing skewed   selection biases that favour some experts, as trained routers do (the
                       expert-cache hit rates depend on it); uniform (default): none
    --type q8_0        every matrix Q8_0 (the router and norms F32) instead of Q4_K_M's types
    --experts N        N routed experts per MoE layer instead of the shape's (e.g. 136 at Q8_0:
                       a 35 GB file, 1.5x a 24 GB machine's RAM, for the --experts-mem rows)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_random_model import tokenizer_fields  # noqa: E402

SHAPES = {
    "moonlight": dict(name="random-moonlight-16b-a3b-shape", hidden=2048, layers=27,
                      dense_layers=1, heads=16, kv_lora=512, nope=128, rope=64, value=128,
                      ffn=11264, experts=64, experts_used=6, expert_ffn=1408, shared=2,
                      vocab=163840, context=8192, rope_base=50000.0, rms_epsilon=1e-5,
                      routed_scale=2.446),
    # DeepSeek-V2-Lite: softmax routing without a selection bias, top-6 weights not normalised,
    # no routed scale; its dense FFN's 10944-wide down rows take llama.cpp's Q8_0 fallback.
    "v2-lite": dict(name="random-deepseek-v2-lite-shape", hidden=2048, layers=27, dense_layers=1,
                    heads=16, kv_lora=512, nope=128, rope=64, value=128, ffn=10944, experts=64,
                    experts_used=6, expert_ffn=1408, shared=2, vocab=102400, context=8192,
                    rope_base=10000.0, rms_epsilon=1e-6, routed_scale=1.0, gating="softmax"),
    "small": dict(name="random-moe-small-shape", hidden=1024, layers=4, dense_layers=1, heads=8,
                  kv_lora=256, nope=64, rope=64, value=64, ffn=2816, experts=64, experts_used=6,
                  expert_ffn=512, shared=2, vocab=50304, context=4096, rope_base=50000.0,
                  rms_epsilon=1e-5, routed_scale=2.446),
}
Q = gguf.GGMLQuantizationType
# Bytes per block and elements per block, and the byte offsets of each block's f16 scale(s)
# with the value that keeps weights around +-0.02.
BLOCKS = {Q.Q4_K: (144, 256, [(0, 2e-5), (2, 1.5e-4)]), Q.Q6_K: (210, 256, [(208, 5e-6)]),
          Q.Q5_0: (22, 32, [(0, 1e-3)]), Q.Q8_0: (34, 32, [(0, 1.5e-4)])}


def random_blocks(rng: np.random.Generator, qtype, rows: int, cols: int, count: int = 1) -> np.ndarray:
    block_bytes, block_elements, scales = BLOCKS[qtype]
    assert cols % block_elements == 0, (qtype, cols)
    data = rng.integers(0, 256, (count, rows, cols // block_elements, block_bytes), dtype=np.uint8)
    for offset, value in scales:
        jitter = rng.uniform(0.5, 1.5, (count, rows, cols // block_elements)).astype(np.float16)
        data[..., offset:offset + 2] = (jitter * np.float16(value)).view(np.uint8).reshape(
            count, rows, cols // block_elements, 2)
    shape = (count, rows, cols // block_elements * block_bytes)
    return data.reshape(shape if count > 1 else shape[1:])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon"))
                        / "models")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="moonlight")
    parser.add_argument("--routing", choices=["uniform", "skewed"], default="uniform")
    parser.add_argument("--type", choices=["q4_k_m", "q8_0"], default="q4_k_m")
    parser.add_argument("--experts", type=int, default=0)
    args = parser.parse_args()
    s = dict(SHAPES[args.shape])
    if args.experts:
        s["experts"] = args.experts
        s["name"] += f"-{args.experts}-experts"
    suffix = "" if args.routing == "uniform" else "-skewed"
    type_name = "Q4_K_M" if args.type == "q4_k_m" else "Q8_0"
    path = args.out / f"{s['name']}{suffix}.{type_name}.gguf"
    # Q4_K_M's types per role, or Q8_0 for every matrix.
    q8 = args.type == "q8_0"
    Q4K, Q6K, Q5_0 = (Q.Q8_0,) * 3 if q8 else (Q.Q4_K, Q.Q6_K, Q.Q5_0)
    if path.exists():
        print(path)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), arch="deepseek2")
    writer.add_name(f"random weights, {args.shape} shape, {args.routing} routing, {type_name}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_context_length(s["context"])
    writer.add_embedding_length(s["hidden"])
    writer.add_block_count(s["layers"])
    writer.add_feed_forward_length(s["ffn"])
    writer.add_head_count(s["heads"])
    writer.add_head_count_kv(1)
    writer.add_rope_freq_base(s["rope_base"])
    writer.add_layer_norm_rms_eps(s["rms_epsilon"])
    writer.add_vocab_size(s["vocab"])
    writer.add_q_lora_rank(0)
    writer.add_kv_lora_rank(s["kv_lora"])
    writer.add_key_length(s["kv_lora"] + s["rope"])
    writer.add_value_length(s["kv_lora"])
    writer.add_key_length_mla(s["nope"] + s["rope"])
    writer.add_value_length_mla(s["value"])
    writer.add_rope_dimension_count(s["rope"])
    writer.add_leading_dense_block_count(s["dense_layers"])
    writer.add_expert_count(s["experts"])
    writer.add_expert_used_count(s["experts_used"])
    writer.add_expert_shared_count(s["shared"])
    writer.add_expert_feed_forward_length(s["expert_ffn"])
    softmax = s.get("gating") == "softmax"
    if softmax and args.routing == "skewed":
        raise SystemExit("--routing skewed needs the sigmoid router's selection bias")
    writer.add_expert_weights_scale(s["routed_scale"])
    writer.add_expert_weights_norm(not softmax)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX if softmax
                                  else gguf.ExpertGatingFuncType.SIGMOID)
    tokenizer_fields(writer, s["vocab"])

    # (name, qtype or None for f32, rows, cols, count): tensor info first, data streamed after.
    tensors: list[tuple[str, object, int, int, int]] = []

    def matrix(name: str, qtype, rows: int, cols: int, count: int = 1) -> None:
        # llama.cpp's fallbacks for rows that are no multiple of a K-quant's 256 values.
        if cols % 256 != 0:
            qtype = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}.get(qtype, qtype)
        tensors.append((name, qtype, rows, cols, count))

    hidden, heads = s["hidden"], s["heads"]
    matrix("token_embd.weight", Q4K, s["vocab"], hidden)
    matrix("output_norm.weight", None, 1, hidden)
    matrix("output.weight", Q6K, s["vocab"], hidden)
    shared_ffn = s["shared"] * s["expert_ffn"]
    for layer in range(s["layers"]):
        p = f"blk.{layer}."
        matrix(p + "attn_norm.weight", None, 1, hidden)
        matrix(p + "attn_q.weight", Q4K, heads * (s["nope"] + s["rope"]), hidden)
        matrix(p + "attn_kv_a_mqa.weight", Q4K, s["kv_lora"] + s["rope"], hidden)
        matrix(p + "attn_kv_a_norm.weight", None, 1, s["kv_lora"])
        matrix(p + "attn_k_b.weight", Q.Q8_0, s["kv_lora"], s["nope"], heads)
        matrix(p + "attn_v_b.weight", Q4K, s["value"], s["kv_lora"], heads)
        matrix(p + "attn_output.weight", Q4K, hidden, heads * s["value"])
        matrix(p + "ffn_norm.weight", None, 1, hidden)
        if layer < s["dense_layers"]:
            matrix(p + "ffn_gate.weight", Q4K, s["ffn"], hidden)
            matrix(p + "ffn_up.weight", Q4K, s["ffn"], hidden)
            matrix(p + "ffn_down.weight", Q6K, hidden, s["ffn"])
            continue
        matrix(p + "ffn_gate_inp.weight", None, s["experts"], hidden)
        if not softmax:
            matrix(p + "exp_probs_b.bias", None, 1, s["experts"])
        matrix(p + "ffn_gate_exps.weight", Q4K, s["expert_ffn"], hidden, s["experts"])
        matrix(p + "ffn_up_exps.weight", Q4K, s["expert_ffn"], hidden, s["experts"])
        matrix(p + "ffn_down_exps.weight", Q5_0, hidden, s["expert_ffn"], s["experts"])
        matrix(p + "ffn_gate_shexp.weight", Q4K, shared_ffn, hidden)
        matrix(p + "ffn_up_shexp.weight", Q4K, shared_ffn, hidden)
        matrix(p + "ffn_down_shexp.weight", Q4K, hidden, shared_ffn)

    def data(qtype, rows: int, cols: int, count: int, name: str) -> np.ndarray:
        if qtype is not None:
            return random_blocks(rng, qtype, rows, cols, count)
        if name.endswith("norm.weight"):
            return np.ones(cols, dtype=np.float32)
        if name.endswith("exp_probs_b.bias") and args.routing == "skewed":
            # A Zipf-like preference (expert of rank r gets -0.25 ln r over the sigmoid scores),
            # in a random order per layer: a fifth of the experts take most selections.
            preference = -0.25 * np.log(np.arange(1, cols + 1, dtype=np.float32))
            return rng.permutation(preference).astype(np.float32)
        values = (rng.standard_normal((rows, cols)) * (0.05 if rows > 1 else 0.05)).astype(np.float32)
        return values if rows > 1 else values[0]

    for name, qtype, rows, cols, count in tensors:
        if qtype is None:
            shape = (rows, cols) if rows > 1 else (cols,)
            writer.add_tensor_info(name, shape, np.dtype(np.float32), rows * cols * 4)
        else:
            block_bytes, block_elements, _ = BLOCKS[qtype]
            byte_shape = ((count,) if count > 1 else ()) + (rows, cols // block_elements * block_bytes)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8),
                                   int(np.prod(byte_shape)), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, (name, qtype, rows, cols, count) in enumerate(tensors):
        writer.write_tensor_data(data(qtype, rows, cols, count, name))
        if name.endswith("ffn_down_exps.weight"):
            print(f"{name} ({index + 1}/{len(tensors)})", file=sys.stderr)
    writer.close()
    partial.rename(path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
