#!/usr/bin/env python3
"""llama.cpp's logits on the tiny MoE / MLA models of tools/tiny_models.py (deepseek2 with and
without q_lora, with split attn_k_b/attn_v_b and with the older attn_kv_b, Kimi-K2's and
Moonlight's shapes; Mixtral; Qwen3-MoE), F32 and Q8_0 GGUF files, for
tests/models/decoder_model_test's llama.cpp comparison: max |logit difference|, perplexity and
teacher-forced greedy agreement.

llama.cpp is used only as a reference, through its Python binding (llama-cpp-python, the
version pinned in tools/requirements-llamacpp.txt; low-level ctypes API). Nothing of it is
copied into tachyon. The GGUF files come from the test venv (numpy + gguf), llama.cpp from the
binding built by bench/build_llama_server.sh (or .venv-llamacpp):

    .venv/bin/python tools/tiny_models.py /tmp/tiny $(.venv/bin/python \\
        tools/make_llamacpp_moe_goldens.py --list)
    PYTHONPATH=.peers/llama-server/src LLAMA_CPP_LIB_PATH=.peers/llama-server/build/bin \\
        .peers/venv/bin/python tools/make_llamacpp_moe_goldens.py /tmp/tiny [OUT_DIR]

OUT_DIR (default tests/golden/llamacpp_moe) gets manifest.json: per model and dtype the GGUF's
sha256 and SEQUENCES random sequences of 128 token ids, each evaluated as one batch from an
empty f32 KV cache, with llama.cpp's per-position argmax, top-2 gap and the negative
log-likelihood of the next token (positions 0..126 predicting 1..127; perplexity = exp of their
mean over all sequences); for F32 files also `<config>.<dtype>.logits`, the first sequence's
first LOGITS_POSITIONS rows of logits (little-endian f32 [LOGITS_POSITIONS, vocab]).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

# llama.cpp's binding (imported in main: --list needs only the standard library and numpy).
L = None
llama_cpp = None

ROOT = Path(__file__).resolve().parent.parent

NUM_TOKENS = 128
SEQUENCES = 4
LOGITS_POSITIONS = 64
MODELS = [("deepseek_v3_groups", "f32"), ("deepseek_v3_groups", "q8_0"),
          ("deepseek_v2_lite", "f32"), ("deepseek_v2_lite", "q8_0"),
          ("kimi_k2_tiny", "f32"), ("moonlight_tiny", "f32"),
          ("mixtral_tiny", "f32"), ("qwen3_moe_tiny", "f32"), ("qwen2_moe_tiny", "f32")]
GGML_TYPE_F32 = 0


def token_ids(name: str, vocab_size: int, sequence: int) -> list[int]:
    """Random ids (never <|bos|> / <|eos|>, the last two), fixed per model and sequence."""
    rng = np.random.default_rng([9500 + sum(name.encode()), sequence])
    return [int(t) for t in rng.integers(0, vocab_size - 2, NUM_TOKENS)]


def llamacpp_logits(path: Path, ids: list[int]) -> np.ndarray:
    params = L.llama_model_default_params()
    params.n_gpu_layers = 0
    model = L.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise SystemExit(f"llama.cpp failed to load {path}")
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    context_params = L.llama_context_default_params()
    context_params.n_ctx = NUM_TOKENS
    context_params.n_batch = context_params.n_ubatch = NUM_TOKENS
    context_params.n_seq_max = 1
    context_params.n_threads = context_params.n_threads_batch = 2
    context_params.type_k = context_params.type_v = GGML_TYPE_F32  # an exact cache, as ours
    context = L.llama_init_from_model(model, context_params)
    if not context:
        raise SystemExit("llama_init_from_model failed")
    batch = L.llama_batch_init(NUM_TOKENS, 0, 1)
    for i, token in enumerate(ids):
        batch.token[i] = token
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1
    batch.n_tokens = len(ids)
    if L.llama_decode(context, batch) != 0:
        raise SystemExit("llama_decode failed")
    logits = np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(context, i), shape=(vocab,))
                       .copy() for i in range(len(ids))])
    L.llama_batch_free(batch)
    L.llama_free(context)
    L.llama_model_free(model)
    return logits.astype(np.float32)


def next_token_nll(logits: np.ndarray, ids: list[int]) -> np.ndarray:
    """-log p(ids[t + 1]) at positions 0..n-2, in float64."""
    x = logits[:-1].astype(np.float64)
    log_probs = x - x.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    return -log_probs[np.arange(len(ids) - 1), ids[1:]]


def main() -> None:
    if sys.argv[1:] == ["--list"]:
        print(" ".join(f"{name}.{dtype}" for name, dtype in MODELS))
        return
    global L, llama_cpp
    import llama_cpp as binding
    import llama_cpp.llama_cpp as low_level
    L, llama_cpp = low_level, binding
    models = Path(sys.argv[1])
    out = Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "tests/golden/llamacpp_moe")
    out.mkdir(parents=True, exist_ok=True)
    L.llama_backend_init()
    entries = []
    for name, dtype in MODELS:
        path = models / f"{name}.{dtype}.gguf"
        model_params = L.llama_model_default_params()
        model_params.vocab_only = True
        probe = L.llama_model_load_from_file(str(path).encode(), model_params)
        vocab_size = L.llama_vocab_n_tokens(L.llama_model_get_vocab(probe))
        L.llama_model_free(probe)
        sequences, nll = [], []
        for sequence in range(SEQUENCES):
            ids = token_ids(name, vocab_size, sequence)
            logits = llamacpp_logits(path, ids)
            top2 = np.sort(logits, -1)[:, -2:]
            sequence_nll = next_token_nll(logits, ids)
            nll.append(sequence_nll)
            sequences.append({"token_ids": ids, "argmax": [int(i) for i in logits.argmax(-1)],
                              "top1_top2_gap": [round(float(g), 5) for g in top2[:, 1] - top2[:, 0]],
                              "next_token_nll": [round(float(v), 6) for v in sequence_nll]})
            if sequence == 0 and dtype == "f32":
                file_name = f"{name}.{dtype}.logits"
                logits[:LOGITS_POSITIONS].astype("<f4").tofile(out / file_name)
        entry = {"config": name, "dtype": dtype, "gguf": path.name,
                 "gguf_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                 "vocab_size": vocab_size,
                 "perplexity": float(np.exp(np.concatenate(nll).mean())),
                 "sequences": sequences}
        if dtype == "f32":
            entry["logits_file"] = file_name
        entries.append(entry)
        print(f"{name}.{dtype}: perplexity {entry['perplexity']:.3f}")
    manifest = {
        "generator": "tools/make_llamacpp_moe_goldens.py (GGUF files: tools/tiny_models.py)",
        "reference": "llama.cpp through llama-cpp-python " + llama_cpp.__version__
                     + ", CPU, 2 threads, f32 KV cache, each sequence one batch of 128 positions",
        "logits_format": f"little-endian float32, row-major [{LOGITS_POSITIONS}, vocab_size], "
                         "positions 0.. of the first sequence",
        "entries": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(entries)} entries to {out}")


if __name__ == "__main__":
    main()
