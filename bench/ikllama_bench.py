#!/usr/bin/env python3
"""The tests of bench/llamacpp_bench.py (pp, tg, batched) for ik_llama.cpp, the fastest CPU fork
of llama.cpp (issue 6's second peer), through the ctypes API of its PyPI binding
ik-llama-cpp-python, which differs from llama-cpp-python's (older context parameters,
llama_kv_cache_clear, a flash_attn flag). Same JSON shape as `tachyon bench --json`.

    .venv-ikllama/bin/python bench/ikllama_bench.py [-m MODEL.gguf] [-t 2] [-r 5] [-p 512]
        [-n 128] [-d DEPTH] [--parallel 32 --parallel-prompt 128 --parallel-gen 64] [--json]
        [--rtr] [--cache-type f16|q8_0]

Tests, as in llamacpp_bench.py: ppN (N random tokens from an empty cache, one ubatch of up to
512, logits for the last), tgN (N single-token decodes from an empty cache, or with -d after
DEPTH random tokens, untimed: "tgN @ dDEPTH"), batchedN (N
sequences with random prompts, then steps decoding one token of each in one batch; tokens/s of
those steps). Flash attention on (ik_llama.cpp's default), f16 KV cache (or --cache-type), one warm-up run per
test, mean and sample stddev of the per-repetition tokens/s.

Install (builds ik_llama.cpp from source, ~30 min on 2 cores): see
tools/requirements-ikllama.txt.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import ik_llama_cpp
from ik_llama_cpp import _ctypes_api as L

DEFAULT_MODEL = Path.home() / ".cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


GGML_TYPES = {"f16": 1, "q8_0": 8}  # ggml_type values of the KV cache's types


class Bench:
    def __init__(self, model_path: Path, threads: int, n_ubatch: int, repack: bool = False,
                 cache_type: str = "f16"):
        params = L.llama_model_default_params()
        params.n_gpu_layers = 0
        # -rtr: weights repacked at load into ik_llama.cpp's run-time layouts (no mmap then).
        params.repack_tensors = repack
        if repack:
            params.use_mmap = False
        self.model = L.llama_model_load_from_file(str(model_path).encode(), params)
        if not self.model:
            raise SystemExit(f"failed to load {model_path}")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.threads = threads
        self.n_ubatch = n_ubatch
        self.cache_type = GGML_TYPES[cache_type]
        self.rng = random.Random(1234)

    def context(self, n_ctx: int, n_seq: int = 1, n_batch: int = 2048):
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = max(n_batch, n_seq)
        params.n_ubatch = self.n_ubatch
        params.n_seq_max = n_seq
        params.n_threads = self.threads
        params.n_threads_batch = self.threads
        params.flash_attn = True
        # MLA models (mla_attn 3) cache only the latent, as K: type_k is its type.
        params.type_k = params.type_v = self.cache_type
        ctx = L.llama_init_from_model(self.model, params)
        if not ctx:
            raise SystemExit("llama_init_from_model failed")
        return ctx

    def token(self) -> int:
        return self.rng.randrange(self.n_vocab)

    @staticmethod
    def fill(batch, tokens: list[int], positions: list[int], seqs: list[int], logits: list[bool]):
        for i, (token, pos, seq, want) in enumerate(zip(tokens, positions, seqs, logits)):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if want else 0
        batch.n_tokens = len(tokens)

    def timed(self, name: str, count: int, run, reps: int) -> dict:
        run()  # warm-up
        rates = []
        for _ in range(reps):
            seconds = run()
            rates.append(count / seconds)
        mean, std = mean_std(rates)
        return {"test": name, "tokens_per_second": mean, "stddev": std, "samples": rates}

    def test_pp(self, n: int, reps: int) -> dict:
        ctx = self.context(n)
        batch = L.llama_batch_init(max(n, 1), 0, 1)

        def run() -> float:
            L.llama_kv_cache_clear(ctx)
            start = time.perf_counter()
            done = 0
            while done < n:
                count = min(n - done, 2048)
                self.fill(batch, [self.token() for _ in range(count)],
                          list(range(done, done + count)), [0] * count,
                          [done + i == n - 1 for i in range(count)])
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (pp)")
                done += count
            return time.perf_counter() - start

        result = self.timed(f"pp{n}", n, run, reps)
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        return result

    def test_tg(self, n: int, reps: int, depth: int = 0) -> dict:
        ctx = self.context(depth + n)
        batch = L.llama_batch_init(max(1, min(depth, 2048)), 0, 1)

        def run() -> float:
            L.llama_kv_cache_clear(ctx)
            done = 0
            while done < depth:  # the depth, untimed (llama-bench's -d)
                count = min(depth - done, 2048)
                self.fill(batch, [self.token() for _ in range(count)],
                          list(range(done, done + count)), [0] * count, [False] * count)
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (depth)")
                done += count
            tokens = [self.token() for _ in range(n)]
            start = time.perf_counter()
            for i in range(n):
                self.fill(batch, [tokens[i]], [depth + i], [0], [True])
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (tg)")
            return time.perf_counter() - start

        result = self.timed(f"tg{n}" + (f" @ d{depth}" if depth else ""), n, run, reps)
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        return result

    def test_batched(self, n_seq: int, n_pp: int, n_tg: int, reps: int) -> dict:
        ctx = self.context(n_seq * (n_pp + n_tg), n_seq)
        batch = L.llama_batch_init(max(n_pp, n_seq), 0, 1)

        def run() -> float:
            L.llama_kv_cache_clear(ctx)
            for seq in range(n_seq):
                self.fill(batch, [self.token() for _ in range(n_pp)], list(range(n_pp)),
                          [seq] * n_pp, [i == n_pp - 1 for i in range(n_pp)])
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (batched prompt)")
            start = time.perf_counter()
            for step in range(n_tg):
                self.fill(batch, [self.token() for _ in range(n_seq)], [n_pp + step] * n_seq,
                          list(range(n_seq)), [True] * n_seq)
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (batched generation)")
            return time.perf_counter() - start

        result = self.timed(f"batched{n_seq}", n_seq * n_tg, run, reps)
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-r", "--reps", type=int, default=5)
    parser.add_argument("-p", "--n-prompt", type=int, default=512)
    parser.add_argument("-n", "--n-gen", type=int, default=128)
    parser.add_argument("-d", "--depth", type=int, default=0,
                        help="tokens already in the cache before the tg test (untimed)")
    parser.add_argument("-ub", "--ubatch-size", type=int, default=512)
    parser.add_argument("--parallel", type=int, default=0)
    parser.add_argument("--parallel-prompt", type=int, default=128)
    parser.add_argument("--parallel-gen", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cache-type", choices=sorted(GGML_TYPES), default="f16",
                        help="KV cache type (-ctk/-ctv; MLA models cache the latent as K)")
    parser.add_argument("--rtr", action="store_true",
                        help="run-time repacking (ik_llama.cpp's -rtr); MLA mode 3, fused MoE "
                             "and flash attention are its defaults")
    args = parser.parse_args()
    L.llama_backend_init()
    bench = Bench(args.model.expanduser(), args.threads, args.ubatch_size, args.rtr,
                  args.cache_type)
    results = []
    if args.n_prompt > 0:
        results.append(bench.test_pp(args.n_prompt, args.reps))
    if args.n_gen > 0:
        results.append(bench.test_tg(args.n_gen, args.reps, args.depth))
    if args.parallel > 0:
        results.append(bench.test_batched(args.parallel, args.parallel_prompt, args.parallel_gen,
                                          args.reps))
    L.llama_free_model(bench.model)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"ik_llama.cpp via ik-llama-cpp-python {ik_llama_cpp.__version__}; "
              f"model {args.model.name}; threads {args.threads}; reps {args.reps}")
        for r in results:
            print(f"{r['test']:<10} {r['tokens_per_second']:10.2f} ± {r['stddev']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
