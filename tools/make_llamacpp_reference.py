#!/usr/bin/env python3
"""Regenerate tests/golden/llamacpp/reference.json: llama.cpp's outputs on the default model.

llama.cpp is used only as a reference, through its Python binding (llama-cpp-python, low-level
ctypes API); nothing from it is copied into tachyon. Install the binding into its own venv
(see tools/requirements-llamacpp.txt), then:

    .venv-llamacpp/bin/python tools/make_llamacpp_reference.py \
        [--model ~/.cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--corpus /work/shared/data/corpus/tinyshakespeare.txt] [--threads 2]

It records
  * greedy continuations: for 10 raw-completion prompts (no chat template applied), the prompt's
    token ids (add_special=False, parse_special=True), then 128 tokens chosen as the argmax of the
    logits (computed here from llama_get_logits_ith, no llama.cpp sampler involved, so no
    repetition penalty/top-k/min-p default can sneak in), generation never stopping at EOS;
  * perplexity on the first 32,768 tokens of the corpus, llama.cpp `llama-perplexity` scheme
    (see PPL_SCHEME below), with the NLL computed here in float64 from the logits;
  * version/build info and timings.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import hashlib
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

import llama_cpp
import llama_cpp.llama_cpp as L

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path.home() / ".cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CORPUS = Path("/work/shared/data/corpus/tinyshakespeare.txt")
DEFAULT_OUT = REPO / "tests/golden/llamacpp/reference.json"

N_GEN = 128
PPL_TOKENS = 32768
PPL_CTX = 512
PPL_FIRST = PPL_CTX // 2  # llama-perplexity: first = n_ctx/2

PPL_SCHEME = (
    "llama.cpp llama-perplexity default scheme: tokenize the whole file (no BOS: the model's "
    "add_bos_token is false), keep the first 32768 tokens, cut them into 64 non-overlapping "
    "windows w[0..511] (stride 512). Each window is evaluated from an empty KV cache as one "
    "batch at positions 0..511. Scored: for i in 256..510, -log softmax(logits at position i)"
    "[w[i+1]] (logits at positions 256..510 predict tokens 257..511), i.e. 255 tokens per "
    "window (llama.cpp: first = n_ctx/2, n_scored = n_ctx - 1 - first), 64*255 = 16320 in "
    "all. PPL = exp(mean NLL), NLL computed in float64 from the float32 logits."
)

# (name, prompt). Raw completion: the text is tokenized as is, no template applied.
PROMPTS = [
    ("prose", "The old lighthouse keeper climbed the spiral stairs one last time, and as he reached the top he"),
    ("question", "Question: Why is the sky blue?\nAnswer:"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("list", "Things to pack for a weekend camping trip:\n1. A tent\n2."),
    ("chat", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"),
    ("arithmetic", "12 + 7 = 19\n45 - 18 = 27\n6 * 8 = 48\n144 / 12 ="),
    ("non_english", "La ville de Paris est connue pour ses musées, ses cafés et"),
    ("long_paragraph",
     "The history of the printing press is, in many ways, the history of the modern world. "
     "Before Johannes Gutenberg introduced movable metal type in Mainz around 1440, books in "
     "Europe were copied by hand, usually by monks working in scriptoria, and a single volume "
     "could take months or even years to complete. Books were therefore rare and expensive, "
     "and literacy was confined to a small elite of clergy, scholars and wealthy merchants. "
     "Gutenberg's press changed this almost overnight. By combining a screw press adapted from "
     "wine making, an oil-based ink that adhered to metal, and a hand mould that could cast "
     "thousands of identical letters, he made it possible to produce hundreds of copies of a "
     "text in the time a scribe needed for one. Within fifty years, printing shops had spread "
     "to more than two hundred cities across the continent, and an estimated twenty million "
     "volumes had been printed. The consequences were profound. Scientific ideas could be "
     "shared and checked by readers far away, religious reformers could reach ordinary "
     "people directly, and national languages began to standardize as printers chose one "
     "spelling over another. Historians still debate which of these effects mattered most, "
     "but few doubt that"),
    ("leading_whitespace", "   \n  Once upon a time, in a small village by the sea,"),
    ("one_word", "Hello"),
]


class Log:
    """Collects llama.cpp's log lines (so stdout stays clean) and lets us grep them."""

    def __init__(self, echo: bool):
        self.lines: list[str] = []
        self.echo = echo

        @L.llama_log_callback
        def _cb(level, text, user_data):  # noqa: ARG001
            s = text.decode("utf-8", errors="replace")
            self.lines.append(s)
            if self.echo:
                sys.stderr.write(s)

        self._cb = _cb  # keep alive
        L.llama_log_set(self._cb, ctypes.c_void_p(0))

    def lines_matching(self, needles) -> list[str]:
        out = []
        for ln in "".join(self.lines).splitlines():
            ln = ln.strip()
            if any(n in ln for n in needles) and ln not in out:
                out.append(ln)
        return out


def ggml_info() -> dict:
    out = {}
    libdir = Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml.so"):
        p = libdir / name
        if not p.exists():
            continue
        lib = ctypes.CDLL(str(p))
        for fn in ("ggml_version", "ggml_commit"):
            if hasattr(lib, fn):
                f = getattr(lib, fn)
                f.restype = ctypes.c_char_p
                out[fn] = f().decode()
        if out:
            break
    return out


def version_info(log: Log) -> dict:
    info = {
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_commit": "0c1e57098 (ggml-org/llama.cpp, 2026-10-01, as vendored by llama-cpp-python 0.3.36)",
        "llama_cpp_version": "0.5.0-dev",
        "llama_print_system_info": L.llama_print_system_info().decode().strip(),
        **ggml_info(),
        "ggml_commit_note": "'-dirty' is an artefact of building from the unpacked sdist (git "
                            "diff-index sees new file times); the vendored tree is a clean "
                            "llama.cpp@0c1e57098bba43ac29e6e3b677cdceebdd22334f (git status: no changes)",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                info["cpu"] = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Model:
    def __init__(self, path: Path):
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise SystemExit(f"failed to load {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        b = text.encode("utf-8")
        cap = len(b) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, b, len(b), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self.vocab, b, len(b), buf, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError("llama_tokenize failed")
        return list(buf[:n])

    def detokenize(self, ids: list[int]) -> bytes:
        arr = (L.llama_token * max(1, len(ids)))(*ids)
        cap = 16 * len(ids) + 64
        out = ctypes.create_string_buffer(cap)
        # remove_special=False, unparse_special=True: render special tokens as their text.
        n = L.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, True)
        if n < 0:
            cap = -n + 1
            out = ctypes.create_string_buffer(cap)
            n = L.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, True)
        return out.raw[:n]

    def piece(self, tok: int) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(self.vocab, tok, buf, 256, 0, True)
        return buf.raw[:max(n, 0)]

    def context(self, n_ctx: int, n_batch: int, threads: int):
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        # Everything else (flash_attn_type AUTO, f16 KV cache) stays at llama.cpp's defaults.
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise SystemExit("llama_init_from_model failed")
        return ctx


def make_batch(cap: int):
    return L.llama_batch_init(cap, 0, 1)


def fill_batch(batch, tokens: list[int], pos0: int, want_logits) -> None:
    for i, t in enumerate(tokens):
        batch.token[i] = t
        batch.pos[i] = pos0 + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if want_logits(i) else 0
    batch.n_tokens = len(tokens)


def decode(ctx, batch) -> None:
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")


def logits_row(ctx, i: int, n_vocab: int) -> np.ndarray:
    p = L.llama_get_logits_ith(ctx, i)
    return np.ctypeslib.as_array(p, shape=(n_vocab,)).copy()


def greedy(m: Model, ctx, batch, n_batch: int, prompt_ids: list[int]) -> dict:
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    # Prompt, in chunks of n_batch; logits only for the very last prompt token.
    pos = 0
    while pos < len(prompt_ids):
        chunk = prompt_ids[pos:pos + n_batch]
        last = pos + len(chunk) == len(prompt_ids)
        fill_batch(batch, chunk, pos, lambda i, n=len(chunk), last=last: last and i == n - 1)
        decode(ctx, batch)
        pos += len(chunk)
    out: list[int] = []
    margins: list[float] = []
    first_top = None
    last_idx = batch.n_tokens - 1
    for step in range(N_GEN):
        lg = logits_row(ctx, last_idx, m.n_vocab)
        order = np.argsort(-lg, kind="stable")
        tok = int(order[0])  # argmax, lowest id on ties
        margins.append(round(float(lg[order[0]] - lg[order[1]]), 4))
        if step == 0:
            first_top = [[int(t), round(float(lg[t]), 4)] for t in order[:10]]
        out.append(tok)
        if step == N_GEN - 1:
            break
        fill_batch(batch, [tok], pos, lambda i: True)
        decode(ctx, batch)
        pos += 1
        last_idx = 0
    eog = [i for i, t in enumerate(out) if L.llama_vocab_is_eog(m.vocab, t)]
    return {"ids": out, "eog_positions": eog, "margins": margins, "first_step_top10": first_top}


def perplexity(m: Model, ctx, batch, corpus_ids: list[int]) -> dict:
    n_windows = PPL_TOKENS // PPL_CTX
    window_nll = []
    total = 0.0
    count = 0
    for w in range(n_windows):
        toks = corpus_ids[w * PPL_CTX:(w + 1) * PPL_CTX]
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        # like llama-perplexity: logits requested for positions >= first
        fill_batch(batch, toks, 0, lambda i: i >= PPL_FIRST)
        decode(ctx, batch)
        rows = np.stack([logits_row(ctx, i, m.n_vocab) for i in range(PPL_FIRST, PPL_CTX - 1)])
        rows = rows.astype(np.float64)
        mx = rows.max(axis=1, keepdims=True)
        lse = np.log(np.exp(rows - mx).sum(axis=1)) + mx[:, 0]
        targets = np.array(toks[PPL_FIRST + 1:PPL_CTX], dtype=np.int64)
        nll = lse - rows[np.arange(len(targets)), targets]
        s = float(nll.sum())
        total += s
        count += len(targets)
        window_nll.append(round(s / len(targets), 6))
        print(f"  window {w + 1:2d}/{n_windows}: ppl so far {np.exp(total / count):.4f}", file=sys.stderr)
    return {
        "perplexity": float(np.exp(total / count)),
        "mean_nll": total / count,
        "n_scored_tokens": count,
        "n_windows": n_windows,
        "window_mean_nll": window_nll,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--skip-ppl", action="store_true", help="only the greedy part (for quick checks)")
    ap.add_argument("--verbose", action="store_true", help="echo llama.cpp's log")
    args = ap.parse_args()

    log = Log(args.verbose)
    L.llama_backend_init()
    t0 = time.perf_counter()
    m = Model(args.model.expanduser())
    t_load = time.perf_counter() - t0

    result: dict = {
        "generator": "tools/make_llamacpp_reference.py",
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "versions": version_info(log),
        "model": {
            "file": args.model.name,
            "sha256": sha256_file(args.model.expanduser()),
            "n_vocab": m.n_vocab,
            "add_bos": bool(L.llama_vocab_get_add_bos(m.vocab)),
            "bos": L.llama_vocab_bos(m.vocab),
            "eos": L.llama_vocab_eos(m.vocab),
        },
    }

    # --- greedy continuations ---
    n_ctx = 1024
    ctx = m.context(n_ctx, args.n_batch, args.threads)
    batch = make_batch(max(args.n_batch, PPL_CTX))
    result["settings"] = {
        "n_threads": args.threads,
        "greedy": {"n_ctx": n_ctx, "n_batch": args.n_batch, "n_ubatch": args.n_batch},
        "perplexity": {"n_ctx": PPL_CTX, "n_batch": PPL_CTX, "n_ubatch": PPL_CTX},
        "kv_cache_type": "f16 (llama.cpp default)",
        "flash_attn_type": "auto (llama.cpp default)",
        "llama_cpp_log": [s for s in log.lines_matching(
            ("flash_attn", "Flash Attention", "llama_kv_cache: size", "CPU_REPACK", "- type "))],
    }
    greedy_out = []
    t0 = time.perf_counter()
    n_gen_total = 0
    for name, text in PROMPTS:
        ids = m.tokenize(text, add_special=False, parse_special=True)
        g = greedy(m, ctx, batch, args.n_batch, ids)
        n_gen_total += len(g["ids"])
        cont = m.detokenize(g["ids"])
        entry = {
            "name": name,
            "prompt": text,
            "prompt_ids": ids,
            "prompt_roundtrip_ok": m.detokenize(ids) == text.encode("utf-8"),
            "continuation_ids": g["ids"],
            "continuation_text": cont.decode("utf-8", errors="replace"),
            "eog_positions": g["eog_positions"],
            "first_eog": g["eog_positions"][0] if g["eog_positions"] else None,
            "min_margin": min(g["margins"]),
            "margins": g["margins"],
            "first_step_top10": g["first_step_top10"],
        }
        greedy_out.append(entry)
        print(f"[{name}] {len(ids)} prompt tokens, first EOG at {entry['first_eog']}, "
              f"min top1-top2 margin {entry['min_margin']:.4f}: {entry['continuation_text'][:80]!r}",
              file=sys.stderr)
    t_greedy = time.perf_counter() - t0
    L.llama_free(ctx)
    result["greedy"] = {
        "description": (
            "Raw completion (no chat template). prompt_ids = llama_tokenize(text, add_special=False, "
            "parse_special=True). The prompt is decoded from an empty KV cache; then 128 times: take "
            "the argmax of the last logits (lowest id on ties), append it, decode it. EOS/EOG does not "
            "stop generation; eog_positions lists where end-of-generation tokens were produced. "
            "margins[k] = top1 - top2 logit at step k (small margins mark steps where another engine "
            "may legitimately pick a different token). first_step_top10 = [id, logit] after the "
            "prompt. continuation_text = llama_detokenize(continuation_ids) with special tokens "
            "rendered, invalid UTF-8 replaced."
        ),
        "n_generated": N_GEN,
        "prompts": greedy_out,
    }

    # --- perplexity ---
    corpus_text = args.corpus.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    corpus_ids = m.tokenize(corpus_text, add_special=False, parse_special=False)
    t_tok = time.perf_counter() - t0
    head = corpus_ids[:PPL_TOKENS]
    ppl_entry = {
        "corpus": args.corpus.name,
        "corpus_sha256": sha256_file(args.corpus),
        "scheme": PPL_SCHEME,
        "tokenize": "llama_tokenize(whole file text, add_special=False, parse_special=False)",
        "corpus_n_tokens": len(corpus_ids),
        "first_64_token_ids": corpus_ids[:64],
        "first_32768_token_ids_sha256": hashlib.sha256(np.asarray(head, dtype="<i4").tobytes()).hexdigest(),
        "first_32768_token_ids_sha256_note": "sha256 of the 32768 ids as little-endian int32",
        "n_ctx": PPL_CTX,
        "stride": PPL_CTX,
        "first_scored_position": PPL_FIRST,
    }
    t_ppl = None
    if not args.skip_ppl:
        ctx = m.context(PPL_CTX, PPL_CTX, args.threads)
        t0 = time.perf_counter()
        ppl_entry.update(perplexity(m, ctx, batch, corpus_ids))
        t_ppl = time.perf_counter() - t0
        L.llama_free(ctx)
        print(f"perplexity = {ppl_entry['perplexity']:.4f} over {ppl_entry['n_scored_tokens']} tokens",
              file=sys.stderr)
    result["perplexity"] = ppl_entry
    result["timing_s"] = {
        "model_load": round(t_load, 3),
        "greedy_total": round(t_greedy, 3),
        "greedy_generated_tokens": n_gen_total,
        "corpus_tokenize": round(t_tok, 3),
        "perplexity_total": None if t_ppl is None else round(t_ppl, 3),
        "perplexity_tokens_evaluated": PPL_TOKENS,
        "note": f"wall clock, {args.threads} threads, on a shared machine; indicative only",
    }
    L.llama_batch_free(batch)
    L.llama_model_free(m.model)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1, ensure_ascii=False)
    # keep number lists on one line
    text = re.sub(r"\[\s*([-0-9.eE,\s]+?)\s*\]",
                  lambda mo: "[" + ", ".join(x.strip() for x in mo.group(1).split(",")) + "]", text)
    assert json.loads(text) == json.loads(json.dumps(result)), "compaction changed the data"
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(text.encode()) // 1024} KiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
