#!/usr/bin/env python3
"""Writes a GGUF model with random weights in the Llama-3.2-1B shape (hidden 2048, 16 layers, 32
query / 8 KV heads of 64, FFN 8192, vocabulary 128256, tied embeddings), for speed tests of a
model larger than the default one (issue 6). Written with the PyPI `gguf` package; its numbers
mean nothing, only its shape and weight types do.

    .venv/bin/python tools/make_random_model.py --type Q4_0 [--out DIR]

Every matrix (the embedding too) is stored in --type (Q4_0, Q4_1 or Q8_0, quantized by gguf's
own quantizer), norms in F32. The tokenizer is GPT-2's byte-level BPE (../shared/data/tokenizers
/gpt2) padded with reserved control tokens to the 128256 ids the shape needs, so llama.cpp and
tachyon both load the file as they would a real one. Writes
DIR/random-llama-3.2-1b-shape.<TYPE>.gguf (default DIR: $TACHYON_HOME/models, ~0.7 GB for Q4_0,
~1.3 GB for Q8_0) and prints its path; an existing file is kept.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

import gguf

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT.parent / "shared/data/tokenizers/gpt2"

SHAPE = dict(hidden=2048, layers=16, heads=32, kv_heads=8, head_size=64, ffn=8192, vocab=128256,
             context=8192, rope_base=500000.0, rms_epsilon=1e-5)
TYPES = {"Q4_0": gguf.GGMLQuantizationType.Q4_0, "Q4_1": gguf.GGMLQuantizationType.Q4_1,
         "Q8_0": gguf.GGMLQuantizationType.Q8_0}
FILE_TYPES = {"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
              "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def tokenizer_fields(writer: gguf.GGUFWriter, vocab_size: int) -> None:
    encoder = json.loads((GPT2 / "encoder.json").read_text())
    tokens = [token for token, _ in sorted(encoder.items(), key=lambda item: item[1])]
    merges = [line for line in (GPT2 / "vocab.bpe").read_text().splitlines()[1:] if line]
    normal = len(tokens) - 1  # the last GPT-2 token is <|endoftext|>
    types = [gguf.TokenType.NORMAL] * normal + [gguf.TokenType.CONTROL]
    for i in range(vocab_size - len(tokens)):
        tokens.append(f"<|reserved_special_token_{i}|>")
        types.append(gguf.TokenType.CONTROL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # a name both llama.cpp and tachyon know
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(normal)
    writer.add_eos_token_id(normal)
    writer.add_add_bos_token(False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--type", choices=sorted(TYPES), default="Q4_0")
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon"))
                        / "models")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    path = args.out / f"random-llama-3.2-1b-shape.{args.type}.gguf"
    if path.exists():
        print(path)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    s = SHAPE
    qtype = TYPES[args.type]
    rng = np.random.default_rng(args.seed)
    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), arch="llama")
    writer.add_name(f"random weights, Llama-3.2-1B shape, {args.type}")
    writer.add_file_type(FILE_TYPES[args.type])
    writer.add_context_length(s["context"])
    writer.add_embedding_length(s["hidden"])
    writer.add_block_count(s["layers"])
    writer.add_feed_forward_length(s["ffn"])
    writer.add_head_count(s["heads"])
    writer.add_head_count_kv(s["kv_heads"])
    writer.add_rope_dimension_count(s["head_size"])
    writer.add_rope_freq_base(s["rope_base"])
    writer.add_layer_norm_rms_eps(s["rms_epsilon"])
    writer.add_vocab_size(s["vocab"])
    tokenizer_fields(writer, s["vocab"])

    def matrix(name: str, rows: int, cols: int) -> None:
        weights = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        packed = gguf.quants.quantize(weights, qtype)
        writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(s["hidden"], dtype=np.float32))

    q_size, kv_size = s["heads"] * s["head_size"], s["kv_heads"] * s["head_size"]
    matrix("token_embd.weight", s["vocab"], s["hidden"])  # tied: also the output matrix
    norm("output_norm.weight")
    for layer in range(s["layers"]):
        prefix = f"blk.{layer}."
        norm(prefix + "attn_norm.weight")
        matrix(prefix + "attn_q.weight", q_size, s["hidden"])
        matrix(prefix + "attn_k.weight", kv_size, s["hidden"])
        matrix(prefix + "attn_v.weight", kv_size, s["hidden"])
        matrix(prefix + "attn_output.weight", s["hidden"], q_size)
        norm(prefix + "ffn_norm.weight")
        matrix(prefix + "ffn_gate.weight", s["ffn"], s["hidden"])
        matrix(prefix + "ffn_up.weight", s["ffn"], s["hidden"])
        matrix(prefix + "ffn_down.weight", s["hidden"], s["ffn"])
        print(f"layer {layer + 1}/{s['layers']}", file=sys.stderr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
