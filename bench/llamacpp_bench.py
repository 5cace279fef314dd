#!/usr/bin/env python3
"""llama-bench-style speed tests of llama.cpp, run through its Python binding.

The reference side of `tachyon bench`: the same tests, the same JSON shape. llama.cpp is
driven through llama-cpp-python's low-level ctypes API (llama_decode on prepared batches),
so the only Python work per generated token is two integer stores and one ctypes call.

    .venv-llamacpp/bin/python bench/llamacpp_bench.py [-m MODEL.gguf] [-t 2] [-r 5] [--json]

Tests (as llama.cpp's llama-bench does them):
  pp512  one context with n_ctx = 512; each rep clears the KV cache and decodes 512 random
         tokens (n_batch 2048, n_ubatch 512 => one ubatch), logits for the last token only.
         tokens/s = 512 / wall time.
  tg128  one context with n_ctx = 128; each rep clears the KV cache and decodes 128 tokens one
         at a time (each a batch of 1 with logits), starting from an empty cache (with -d D:
         after D random tokens decoded untimed, as llama-bench's -d; "tg128 @ dD").
         tokens/s = 128 / wall time.
  batchedN (--parallel N): as llama-batched-bench: N sequences in one unified cache, each
         given a random --parallel-prompt token prompt, then --parallel-gen steps that decode one
         token of every sequence in one batch; tokens/s = N * gen / time of those steps (S_TG).
Each test first does an untimed warmup run (pp: a full run; tg: one token), then -r reps;
the reported number is the mean of the per-rep tokens/s and its sample stddev (llama-bench's
avg_ts/stdev_ts). Random token ids are used, like llama-bench (the model's add_bos is honoured).

Besides the wall-clock rate, the human-readable output shows the rate from llama.cpp's own
eval timers (llama_perf_context), i.e. with the Python/ctypes overhead removed, and that
overhead in microseconds per token.

Install: see tools/requirements-llamacpp.txt. Use 2 threads on the shared 2-core machines.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import random
import sys
import time
from pathlib import Path

import llama_cpp
import llama_cpp.llama_cpp as L

DEFAULT_MODEL = Path.home() / ".cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf"


@L.llama_log_callback
def _quiet_log(level, text, user_data):  # noqa: ARG001
    if _VERBOSE:
        sys.stderr.write(text.decode("utf-8", errors="replace"))


_VERBOSE = False


def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


class Bench:
    def __init__(self, model_path: Path, threads: int, n_batch: int, n_ubatch: int, flash_attn: str):
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model_path).encode(), mp)
        if not self.model:
            raise SystemExit(f"failed to load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        self.bos = L.llama_vocab_bos(self.vocab)
        self.threads = threads
        self.n_batch = n_batch
        self.n_ubatch = n_ubatch
        self.flash_attn = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                           "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attn]
        self.rng = random.Random(1234)

    def context(self, n_ctx: int):
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = self.n_batch
        cp.n_ubatch = self.n_ubatch
        cp.n_seq_max = 1
        cp.n_threads = self.threads
        cp.n_threads_batch = self.threads
        cp.flash_attn_type = self.flash_attn
        cp.no_perf = False
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise SystemExit("llama_init_from_model failed")
        return ctx

    def rand_tok(self) -> int:
        return self.rng.randrange(self.n_vocab)

    # --- pp: n_prompt random tokens, chunks of n_batch, logits for the last one only ---
    def run_pp(self, ctx, batch, n_prompt: int) -> None:
        done = 0
        while done < n_prompt:
            n = min(n_prompt - done, self.n_batch)
            for i in range(n):
                batch.token[i] = (self.bos if (done == 0 and i == 0 and self.add_bos) else self.rand_tok())
                batch.pos[i] = done + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if (done + i == n_prompt - 1) else 0
            batch.n_tokens = n
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed (pp)")
            done += n
        L.llama_synchronize(ctx)

    # --- tg: n_gen single-token decodes from an empty cache, or after `depth` tokens ---
    def run_tg(self, ctx, batch, n_gen: int, toks: list[int], depth: int = 0) -> None:
        tok_arr = batch.token
        pos_arr = batch.pos
        decode = L.llama_decode
        sync = L.llama_synchronize
        for i in range(n_gen):
            tok_arr[0] = toks[i]
            pos_arr[0] = depth + i
            if decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed (tg)")
            sync(ctx)

    def test_pp(self, n_prompt: int, reps: int, warmup: bool) -> dict:
        ctx = self.context(n_prompt)
        batch = L.llama_batch_init(max(self.n_batch, 1), 0, 1)
        mem = L.llama_get_memory(ctx)
        if warmup:
            L.llama_memory_clear(mem, False)
            self.run_pp(ctx, batch, n_prompt)
        samples, internal = [], []
        for _ in range(reps):
            L.llama_memory_clear(mem, False)
            L.llama_perf_context_reset(ctx)
            t0 = time.perf_counter_ns()
            self.run_pp(ctx, batch, n_prompt)
            dt = time.perf_counter_ns() - t0
            samples.append(dt)
            internal.append(L.llama_perf_context(ctx).t_p_eval_ms * 1e6)
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        return self._summ(f"pp{n_prompt}", n_prompt, samples, internal)

    def fill_depth(self, ctx, depth: int) -> None:
        """`depth` random tokens into the cleared cache, untimed (llama-bench's -d)."""
        if depth == 0:
            return
        batch = L.llama_batch_init(self.n_batch, 0, 1)
        self.run_pp(ctx, batch, depth)
        L.llama_batch_free(batch)

    def test_tg(self, n_gen: int, reps: int, warmup: bool, depth: int = 0) -> dict:
        ctx = self.context(depth + n_gen)
        batch = L.llama_batch_init(1, 0, 1)
        batch.n_tokens = 1
        batch.n_seq_id[0] = 1
        batch.seq_id[0][0] = 0
        batch.logits[0] = 1
        mem = L.llama_get_memory(ctx)
        first = self.bos if self.add_bos else self.rand_tok()
        if depth > 0:
            first = self.rand_tok()  # (the depth's tokens start with BOS)
        if warmup:
            L.llama_memory_clear(mem, False)
            self.fill_depth(ctx, depth)
            self.run_tg(ctx, batch, 1, [first], depth)
        samples, internal = [], []
        for _ in range(reps):
            toks = [first] + [self.rand_tok() for _ in range(n_gen - 1)]
            L.llama_memory_clear(mem, False)
            self.fill_depth(ctx, depth)
            L.llama_perf_context_reset(ctx)
            t0 = time.perf_counter_ns()
            self.run_tg(ctx, batch, n_gen, toks, depth)
            dt = time.perf_counter_ns() - t0
            samples.append(dt)
            pc = L.llama_perf_context(ctx)
            # single-token decodes are counted as "eval" (n_tokens == 1), except possibly the
            # first one after a reset, which llama.cpp may count as prompt eval.
            internal.append((pc.t_eval_ms + pc.t_p_eval_ms) * 1e6)
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        return self._summ(f"tg{n_gen}" + (f" @ d{depth}" if depth else ""), n_gen, samples,
                          internal)

    # --- batched: n_seq sequences, each a random prompt of n_pp tokens, then n_tg steps that
    # decode one token of every sequence in one batch (llama-batched-bench's S_TG) ---
    def test_batched(self, n_seq: int, n_pp: int, n_tg: int, reps: int, warmup: bool) -> dict:
        cp_ctx = n_seq * (n_pp + n_tg)
        cp = L.llama_context_default_params()
        cp.n_ctx = cp_ctx
        cp.n_batch = max(self.n_batch, n_seq)
        cp.n_ubatch = self.n_ubatch
        cp.n_seq_max = n_seq
        cp.n_threads = self.threads
        cp.n_threads_batch = self.threads
        cp.flash_attn_type = self.flash_attn
        cp.kv_unified = True  # as llama-batched-bench: sequences share one cache of n_ctx cells
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise SystemExit("llama_init_from_model failed (batched)")
        batch = L.llama_batch_init(max(n_pp, n_seq), 0, 1)
        mem = L.llama_get_memory(ctx)

        def one_rep() -> int:
            L.llama_memory_clear(mem, False)
            for seq in range(n_seq):  # prompts, one sequence per decode
                for i in range(n_pp):
                    batch.token[i] = self.rand_tok()
                    batch.pos[i] = i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = seq
                    batch.logits[i] = 1 if i == n_pp - 1 else 0
                batch.n_tokens = n_pp
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (batched prompt)")
            L.llama_synchronize(ctx)
            t0 = time.perf_counter_ns()
            for step in range(n_tg):
                for seq in range(n_seq):
                    batch.token[seq] = self.rand_tok()
                    batch.pos[seq] = n_pp + step
                    batch.n_seq_id[seq] = 1
                    batch.seq_id[seq][0] = seq
                    batch.logits[seq] = 1
                batch.n_tokens = n_seq
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (batched generation)")
                L.llama_synchronize(ctx)
            return time.perf_counter_ns() - t0

        if warmup:
            one_rep()
        samples = [one_rep() for _ in range(reps)]
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        return self._summ(f"batched{n_seq}", n_seq * n_tg, samples, [])

    @staticmethod
    def _summ(name: str, n: int, samples_ns: list[int], internal_ns: list[float]) -> dict:
        ts = [1e9 * n / s for s in samples_ns]
        m, sd = mean_std(ts)
        its = [1e9 * n / s for s in internal_ns if s > 0]
        im, isd = mean_std(its) if its else (float("nan"), 0.0)
        overhead_us = ((sum(samples_ns) - sum(internal_ns)) / len(samples_ns) / n / 1e3
                       if internal_ns else float("nan"))
        return {"test": name, "tokens_per_second": m, "stddev": sd, "samples": ts,
                "_internal_tps": im,
                "_internal_sd": isd, "_overhead_us_per_token": overhead_us, "_samples_ns": samples_ns}


def main() -> int:
    global _VERBOSE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=512, help="pp test size (0 = skip)")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="tg test size (0 = skip)")
    ap.add_argument("-d", "--depth", type=int, default=0,
                    help="tokens already in the cache before the tg test (untimed, llama-bench's -d)")
    ap.add_argument("-b", "--batch-size", type=int, default=2048)
    ap.add_argument("-ub", "--ubatch-size", type=int, default=512)
    ap.add_argument("-fa", "--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--parallel", type=int, default=0,
                    help="batched test: this many sequences (0 = skip), as tachyon bench --parallel")
    ap.add_argument("--parallel-prompt", type=int, default=128)
    ap.add_argument("--parallel-gen", type=int, default=64)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--json", action="store_true",
                    help='print [{"test", "tokens_per_second", "stddev", "samples"}, ...] '
                         '(tachyon bench --json shape)')
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    args = ap.parse_args()

    _VERBOSE = args.verbose
    L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    L.llama_backend_init()
    b = Bench(args.model.expanduser(), args.threads, args.batch_size, args.ubatch_size, args.flash_attn)

    results = []
    if args.n_prompt > 0:
        results.append(b.test_pp(args.n_prompt, args.reps, not args.no_warmup))
    if args.n_gen > 0:
        results.append(b.test_tg(args.n_gen, args.reps, not args.no_warmup, args.depth))
    if args.parallel > 0:
        results.append(b.test_batched(args.parallel, args.parallel_prompt, args.parallel_gen,
                                      args.reps, not args.no_warmup))
    L.llama_model_free(b.model)

    if args.json:
        print(json.dumps([{k: r[k] for k in ("test", "tokens_per_second", "stddev", "samples")}
                          for r in results], indent=1))
    else:
        print(f"llama.cpp via llama-cpp-python {llama_cpp.__version__}; model {args.model.name}; "
              f"threads {args.threads}; reps {args.reps}; n_batch {args.batch_size}; "
              f"n_ubatch {args.ubatch_size}; flash_attn {args.flash_attn}")
        print(f"system: {L.llama_print_system_info().decode().strip()}")
        print(f"| {'test':>6} | {'t/s (wall)':>20} | {'t/s (llama.cpp timers)':>24} | {'py overhead':>13} |")
        print(f"| {'-' * 6} | {'-' * 20} | {'-' * 24} | {'-' * 13} |")
        for r in results:
            print(f"| {r['test']:>6} | {r['tokens_per_second']:>10.2f} ± {r['stddev']:>7.2f} | "
                  f"{r['_internal_tps']:>14.2f} ± {r['_internal_sd']:>7.2f} | "
                  f"{r['_overhead_us_per_token']:>7.1f} us/tok |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
