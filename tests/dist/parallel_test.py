#!/usr/bin/env python3
"""One model over several processes with real `mpirun` (OpenMPI): tensor parallelism (--tp),
pipeline parallelism (--pp) and both, on tiny random models of each architecture (Llama, Qwen,
Gemma 3, MoE, DeepSeek / Kimi MLA) and the default model, against the same model in one process.

Checked: perplexity the same (the issue allows 1e-4 relative; tachyon's splits are exact, so the
same digits are asserted too), greedy continuations of 20 prompts through `serve` with the
official openai client (concurrent, some streamed) the same as one process's, each rank's
resident weights about 1/N of the model's, clear errors for impossible splits, a rank killed
mid-request ending the job within seconds (the client sees a 503 or an SSE error event, nothing
hangs), SIGTERM to mpirun doing the same, and the transport forced to TCP (`--mca btl
tcp,self`) passing the same checks (perplexity in every layout, serving, a rank killed).

    parallel_test.py --tachyon build/tachyon --tiny-models build/tests/models/tiny_models
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from checks import check, exit_status, info, section  # noqa: E402
from server_fixture import TachyonServer, http_get  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "data" / "corpus"

# As root (CI containers) OpenMPI wants both variables; more ranks than cores need
# --oversubscribe; the vader transport's single-copy mode needs ptrace rights containers lack.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
# The transport forced to TCP, as `mpirun --mca btl tcp,self` does (the ranks see it so too).
TCP_ENV = {"OMPI_MCA_btl": "tcp,self"}


def mpirun(ranks: int, argv: list[str], extra: list[str] | tuple = ()) -> list[str]:
    return ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", *extra, *argv]


def run(argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **MPI_ENV})


def perplexity(tachyon: str, model: str | None, text: str, layout: tuple[int, int] | None,
               extra_mpi: list[str] | tuple = (), tokens: int = 1024,
               extra: list[str] | tuple = ()) -> tuple[float, str]:
    """(perplexity, stderr) of `tachyon perplexity` on `model` (None: the default one, windows
    of 256 tokens; the tiny models' context is 128: windows of 64) with --tp/--pp `layout`, or
    in one process; `extra`: more of its arguments."""
    window = "64" if model else "256"
    argv = [tachyon, "perplexity", *(["-m", model] if model else []), "-f", text, "--ctx", window,
            "--max-tokens", str(tokens), "-t", "1", "--json", *extra]
    if layout:
        tp, pp = layout
        argv = mpirun(tp * pp, argv + ["--tp", str(tp), "--pp", str(pp)], extra_mpi)
    done = run(argv)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-3000:]}")
    line = [l for l in done.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["perplexity"], done.stderr


def resident_weights(stderr: str) -> dict[int, float]:
    """Each rank's 'rank R: ...; X MiB of weights resident' log line."""
    found = {}
    for match in re.finditer(r"rank (\d+): .*?; ([0-9.]+) MiB of weights resident", stderr):
        found[int(match.group(1))] = float(match.group(2))
    return found


# Each layout's MiB of weights per rank, by (model name, tp, pp).
rank_weights: dict[tuple[str, int, int], dict[int, float]] = {}


def check_perplexity(tachyon: str, name: str, model: str | None, text: str,
                     layouts: list[tuple[int, int]], tokens: int = 1024) -> None:
    alone, _ = perplexity(tachyon, model, text, None, tokens=tokens)
    info(f"{name}: one process perplexity {alone!r}")
    for tp, pp in layouts:
        value, stderr = perplexity(tachyon, model, text, (tp, pp), tokens=tokens)
        relative = abs(value - alone) / alone
        check(f"{name} --tp {tp} --pp {pp}: perplexity within 1e-4 of one process "
              f"({value!r} vs {alone!r})", relative <= 1e-4, relative)
        check(f"{name} --tp {tp} --pp {pp}: the same perplexity to the last digit (exact splits)",
              value == alone, f"{value!r} vs {alone!r}")
        weights = resident_weights(stderr)
        check(f"{name} --tp {tp} --pp {pp}: every rank reported its weights",
              sorted(weights) == list(range(tp * pp)), stderr[-2000:])
        if weights:
            info(f"{name} --tp {tp} --pp {pp}: MiB of weights per rank {weights}")
            rank_weights[(name, tp, pp)] = weights


def check_quantized_exchange(tachyon: str, tiny: Path, text: str) -> None:
    """TP ranks quantize their own columns of the output projection's and FFN down's input and
    exchange the 8-bit blocks (each quantization block within one rank's columns): the same
    perplexity as one process on a Q8_0 model. With one rank at the portable level (its f32
    oracle reads f32 input), the ranks agree on exchanging f32 rows instead: no hang, and the
    same perplexity again (the kernels' levels give the same bits)."""
    model = str(tiny / "llama_gqa.q8_0.gguf")
    alone, _ = perplexity(tachyon, model, text, None)
    value, _ = perplexity(tachyon, model, text, (2, 1))
    check("llama_gqa Q8_0 --tp 2 (8-bit exchange): the same perplexity to the last digit",
          value == alone, f"{value!r} vs {alone!r}")
    argv = [tachyon, "perplexity", "-m", model, "-f", text, "--ctx", "64", "--max-tokens", "1024",
            "-t", "1", "--json", "--tp", "2"]
    mixed = run(["mpirun", "--oversubscribe", "--bind-to", "none",
                 "-np", "1", "env", "TACHYON_CPU_LEVEL=portable", *argv, ":", "-np", "1", *argv],
                timeout=120)
    lines = [l for l in mixed.stdout.splitlines() if l.startswith("{")]
    check("llama_gqa Q8_0 --tp 2, rank 0 at the portable level: finished, the same perplexity",
          mixed.returncode == 0 and lines and json.loads(lines[-1])["perplexity"] == alone,
          f"exit {mixed.returncode}: {mixed.stdout[-300:]} {mixed.stderr[-1500:]}")
    # --quantize under --tp / --pp: each rank quantizes its rows (the first stage its embedding
    # rows too) as one process would. llama_k_quant's FFN (512 rows, 256 per rank) takes the
    # 256-value blocks of the K-quants' 8-bit input; llama_gqa (Q4_0) goes through 2 stages.
    for name, quantize, layouts in (("llama_k_quant", "q4_k", [(2, 1)]),
                                    ("llama_k_quant", "q6_k", [(2, 1)]),
                                    ("llama_gqa", "q4_0", [(1, 2), (2, 2)])):
        argv = [tachyon, "generate", "-m", str(tiny / f"{name}.f32.gguf"), "-p",
                "0123456789abcdef", "-n", "48", "--temp", "0", "-t", "1", "--quantize", quantize]
        one = run(argv, timeout=120)
        for tp, pp in layouts:
            split = run(mpirun(tp * pp, argv + ["--tp", str(tp), "--pp", str(pp)]), timeout=120)
            check(f"{name} --quantize {quantize} --tp {tp} --pp {pp}: the same greedy text as one "
                  f"process", one.returncode == 0 and split.returncode == 0 and
                  one.stdout.strip() != "" and split.stdout == one.stdout,
                  f"exit {one.returncode} / {split.returncode}: {split.stderr[-1000:]}")


def check_tcp(tachyon: str, tiny: Path, text: str, layouts: list[tuple[int, int]]) -> None:
    """The MPI transport forced to TCP (`--mca btl tcp,self`: no shared memory, so every
    exchange goes through MPI's own collectives rather than the shared-memory window) passes the
    same checks: perplexity to the last digit on a tiny f32 model, an MoE model and the default
    model (8-bit exchange) in every layout, greedy continuations through `serve`, and a rank
    killed mid-request (the rank-killed section below runs it over TCP too)."""
    tcp = ["--mca", "btl", "tcp,self"]
    for name, model, cases in (("llama_gqa", str(tiny / "llama_gqa.f32.gguf"), [(2, 1)]),
                               ("deepseek_v3_groups", str(tiny / "deepseek_v3_groups.f32.gguf"),
                                layouts),
                               ("default model", None, layouts)):
        alone, _ = perplexity(tachyon, model, text, None, tokens=512)
        for tp, pp in cases:
            value, _ = perplexity(tachyon, model, text, (tp, pp), tcp, tokens=512)
            check(f"{name} --tp {tp} --pp {pp} over TCP (--mca btl tcp,self): the same "
                  f"perplexity to the last digit", value == alone, f"{value!r} vs {alone!r}")
    check_serving(tachyon, [(2, 1), (2, 2)], TCP_ENV)


def check_expert_placement(tachyon: str, tiny: Path, text: str) -> None:
    """--expert-placement with the load `tachyon bench --json` measured: experts placed by it,
    the hottest copied to another rank with --expert-replicas (their tokens split between the
    copies), the same perplexity to the last digit; clear errors for what cannot work."""
    for name, (tp, pp) in (("qwen3_moe_tiny", (2, 1)), ("deepseek_v3_groups", (2, 2))):
        model = str(tiny / f"{name}.f32.gguf")
        bench = run([tachyon, "bench", "-m", model, "-p", "48", "-n", "16", "-r", "1", "-t", "1",
                     "--json"])
        if not check(f"{name}: bench --json measured the expert load", bench.returncode == 0 and
                     '"experts"' in bench.stdout, bench.stderr[-800:]):
            continue
        load_file = Path(tempfile.mkdtemp()) / "experts.json"
        load_file.write_text(bench.stdout)
        alone, _ = perplexity(tachyon, model, text, None)
        placed = ["--expert-placement", str(load_file), "--expert-replicas", "1"]
        value, stderr = perplexity(tachyon, model, text, (tp, pp), extra=placed)
        check(f"{name} --tp {tp} --pp {pp} --expert-placement (bench's load) --expert-replicas 1: "
              f"the same perplexity to the last digit", value == alone, f"{value!r} vs {alone!r}")
        exchanged, _ = perplexity(tachyon, model, text, (tp, pp),
                                  extra=placed + ["--expert-exchange", "all-to-all"])
        check(f"{name} --tp {tp} --pp {pp}, placed with copies, --expert-exchange all-to-all: the "
              f"same perplexity to the last digit", exchanged == alone,
              f"{exchanged!r} vs {alone!r}")
        summary = re.search(r"routed experts placed by measured load in (\d+) layers, (\d+) extra "
                            r"copies: the most loaded rank at ([0-9.]+)x the mean \(consecutive "
                            r"ids: ([0-9.]+)x\)", stderr)
        info(f"{name}: {summary.group(0) if summary else stderr[-800:]}")
        check(f"{name}: the placement copied experts and balances the ranks at least as well as "
              f"consecutive ids", summary is not None and int(summary.group(2)) > 0 and
              float(summary.group(3)) <= float(summary.group(4)), stderr[-800:])
    model = str(tiny / "qwen3_moe_tiny.f32.gguf")
    bad = Path(tempfile.mkdtemp()) / "bad.json"
    bad.write_text('{"layers": [{"layer": 1, "counts": [1, 2]}]}')
    for what, argv, says in (
            ("a load of another model", mpirun(2, [tachyon, "generate", "-m", model, "-p", "hi",
                                                   "-n", "2", "--tp", "2", "--expert-placement",
                                                   str(bad)]), "routed experts"),
            ("replicas without a load", mpirun(2, [tachyon, "generate", "-m", model, "-p", "hi",
                                                   "-n", "2", "--tp", "2", "--expert-replicas",
                                                   "1"]), "needs their measured load"),
            ("a placement in one process", [tachyon, "generate", "-m", model, "-p", "hi", "-n",
                                            "2", "--expert-placement", str(bad)], "--tp")):
        done = run(argv, timeout=120)
        check(f"--expert-placement, {what}: a clear error, the job ends",
              done.returncode != 0 and says in done.stderr, done.stderr[-800:])


def check_expert_exchange(tachyon: str, tiny: Path, text: str) -> None:
    """Both expert exchanges forced (all-gather: every pair's row to every rank; all-to-all:
    each row to the rank that sums its token, then the sums gathered) give one process's
    perplexity to the last digit, on 2 and 4 TP ranks (4: a 64-token window's tokens in four
    ranges) and with pipeline stages."""
    for name, layouts in (("qwen3_moe_tiny", [(2, 1), (2, 2)]), ("mixtral_tiny", [(2, 1)]),
                          ("deepseek_v3_groups", [(2, 1), (4, 1)])):
        model = str(tiny / f"{name}.f32.gguf")
        alone, _ = perplexity(tachyon, model, text, None, tokens=512)
        for tp, pp in layouts:
            for exchange in ("all-gather", "all-to-all"):
                value, _ = perplexity(tachyon, model, text, (tp, pp), tokens=512,
                                      extra=["--expert-exchange", exchange])
                check(f"{name} --tp {tp} --pp {pp} --expert-exchange {exchange}: the same "
                      f"perplexity to the last digit", value == alone, f"{value!r} vs {alone!r}")


def check_mla_attention(tachyon: str, tiny: Path, text: str) -> None:
    """MLA's decompressed path (--mla-attention decompressed: each rank's heads decompressed
    from the whole latent) under TP and PP: one process's perplexity to the last digit."""
    model = str(tiny / "deepseek_v3_groups.f32.gguf")
    decompressed = ["--mla-attention", "decompressed"]
    alone, _ = perplexity(tachyon, model, text, None, tokens=512, extra=decompressed)
    for tp, pp in ((2, 1), (1, 2)):
        value, _ = perplexity(tachyon, model, text, (tp, pp), tokens=512, extra=decompressed)
        check(f"deepseek_v3_groups --tp {tp} --pp {pp} --mla-attention decompressed: the same "
              f"perplexity to the last digit", value == alone, f"{value!r} vs {alone!r}")


def check_memory() -> None:
    """Each rank's resident weights about 1/N of the model's: the whole is the sum over the
    --tp 2 ranks (a TP split holds no weight twice)."""
    whole = sum(rank_weights[("default model", 2, 1)].values())
    for (name, tp, pp), weights in rank_weights.items():
        if name != "default model":
            continue
        ranks = tp * pp
        largest = max(weights.values())
        check(f"{name} --tp {tp} --pp {pp}: each rank holds about 1/{ranks} of the weights "
              f"(largest {largest:.1f} of {whole:.1f} MiB, at most 1.2/{ranks})",
              largest <= 1.2 * whole / ranks, weights)


def check_errors(tachyon: str, tiny: Path) -> None:
    model = str(tiny / "llama_gqa.f32.gguf")
    done = run([tachyon, "generate", "-m", model, "-p", "hi", "-n", "2", "--tp", "2"])
    check("--tp without mpirun: a clear error", done.returncode != 0 and
          "mpirun -np 2" in done.stderr, done.stderr[-500:])
    done = run(mpirun(3, [tachyon, "generate", "-m", model, "-p", "hi", "-n", "2", "--tp", "2"]),
               timeout=120)
    check("mpirun -np 3 with --tp 2: a clear error, the job ends",
          done.returncode != 0 and "needs 2 processes; mpirun started 3" in done.stderr,
          done.stderr[-800:])
    done = run(mpirun(2, [tachyon, "generate", "-m", str(tiny / "llama_mqa_tied.f32.gguf"),
                          "-p", "hi", "-n", "2", "--tp", "2"]), timeout=120)
    check("--tp 2 on a model with one KV head: a clear error",
          done.returncode != 0 and "1 KV heads" in done.stderr, done.stderr[-800:])
    done = run(mpirun(2, [tachyon, "generate", "-m", model, "-p", "hi", "-n", "2"]), timeout=120)
    check("mpirun -np 2 without --tp/--pp: a clear error",
          done.returncode != 0 and "neither --tp nor --pp" in done.stderr, done.stderr[-800:])


class MpiServer(TachyonServer):
    """`mpirun -np tp*pp tachyon serve ... --tp T --pp P`; stopped through rank 0 (SIGTERM to
    the leader drains it, then the followers stop with it)."""

    def __init__(self, tachyon: str, model: str | None, tp: int, pp: int, args=(),
                 transport_env: dict[str, str] | None = None, **kwargs):
        super().__init__(tachyon, model, [*args, "--tp", str(tp), "--pp", str(pp)],
                         env={**MPI_ENV, **(transport_env or {})}, **kwargs)
        self.ranks = tp * pp

    def command(self) -> list[str]:
        return mpirun(self.ranks, super().command())

    def rank_pids(self) -> dict[int, int]:
        """World rank -> pid of this job's tachyon processes (from their environments)."""
        pids = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"serve" not in cmdline or str(self.port).encode() not in cmdline:
                continue
            for item in environ:
                if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                    pids[int(item.split(b"=")[1])] = int(entry.name)
        return pids

    def stop(self) -> int:
        """SIGTERM to the leader: it drains, stops the followers, and mpirun exits with 0 (a
        SIGTERM to mpirun itself would end every rank at once)."""
        if self.process is not None and self.process.poll() is None:
            leader = self.rank_pids().get(0)
            if leader:
                os.kill(leader, signal.SIGTERM)
                try:
                    self.process.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    pass
        return super().stop()


PROMPTS = [f"Write one sentence about {topic}." for topic in (
    "the sea", "mountains", "a red fox", "bread", "the moon", "rain", "a library", "winter",
    "bicycles", "coffee", "a lighthouse", "owls", "a river", "the desert", "music", "gardens",
    "trains", "snow", "a market", "stars")]


def completions(server: TachyonServer, prompts: list[str]) -> list[str]:
    import openai
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)

    def one(index: int) -> str:
        messages = [{"role": "user", "content": prompts[index]}]
        if index % 3 == 0:  # streamed
            pieces = []
            for chunk in client.chat.completions.create(model="m", messages=messages,
                                                        temperature=0, max_tokens=24,
                                                        stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
            return "".join(pieces)
        reply = client.chat.completions.create(model="m", messages=messages, temperature=0,
                                               max_tokens=24)
        return reply.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(len(prompts))))


def check_serving(tachyon: str, layouts: list[tuple[int, int]],
                  transport_env: dict[str, str] | None = None) -> None:
    args = ["-t", "1", "-c", "1024", "--model-alias", "m"]
    with TachyonServer(tachyon, None, args) as server:
        alone = completions(server, PROMPTS)
    over = " over TCP" if transport_env else ""
    for tp, pp in layouts:
        with MpiServer(tachyon, None, tp, pp, args, transport_env=transport_env,
                       startup_timeout=300) as server:
            split = completions(server, PROMPTS)
        same = sum(a == b for a, b in zip(alone, split))
        check(f"serve --tp {tp} --pp {pp}{over}: greedy continuations identical on {same}/20 prompts "
              f"(at least 19; exact splits: all)", same == len(PROMPTS),
              [(a, b) for a, b in zip(alone, split) if a != b][:3])


TINY_PROMPTS = [[(7 * i + 13 * j) % 200 + 3 for j in range(5 + 3 * i)] for i in range(8)]


def greedy_tokens(server: TachyonServer, prompts: list[list[int]], max_tokens: int,
                  at_once: int) -> list[list[str]]:
    """Each token prompt's greedy completion (its tokens), `at_once` requests at a time."""
    import openai
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)

    def one(prompt: list[int]) -> list[str]:
        reply = client.completions.create(model="m", prompt=prompt, temperature=0,
                                          max_tokens=max_tokens, logprobs=1,
                                          extra_body={"ignore_eos": True})
        return reply.choices[0].logprobs.tokens

    with concurrent.futures.ThreadPoolExecutor(max_workers=at_once) as pool:
        return list(pool.map(one, prompts))


def tiny_completions(server: TachyonServer) -> list[list[str]]:
    """TINY_PROMPTS' 16-token greedy completions, all 8 at once (decode steps of 1-8 tokens)."""
    return greedy_tokens(server, TINY_PROMPTS, 16, len(TINY_PROMPTS))


def check_serving_tiny(tachyon: str, model: str, tp: int, pp: int, split_args=()) -> None:
    """The paged, batched path of a tiny random model through `serve`: 8 concurrent greedy
    completions of token prompts, the same tokens split as in one process (`split_args`: more
    arguments of the split server)."""
    args = ["-t", "1", "-c", "128", "--model-alias", "m"]
    with TachyonServer(tachyon, model, args) as server:
        alone = tiny_completions(server)
    with MpiServer(tachyon, model, tp, pp, [*args, *split_args], startup_timeout=300) as server:
        split = tiny_completions(server)
    same = sum(a == b for a, b in zip(alone, split))
    check(f"{Path(model).stem}: serve --tp {tp} --pp {pp} {' '.join(split_args)}: 8 concurrent "
          f"greedy completions identical to one process's ({same}/8)",
          same == len(TINY_PROMPTS) and all(len(tokens) == 16 for tokens in alone),
          [(a, b) for a, b in zip(alone, split) if a != b][:2])


def check_serving_long_prompts(tachyon: str, model: str | None, tp: int, pp: int,
                               context: int, lengths: list[int]) -> None:
    """Long prompts under --pp: a step with enough tokens (a long prompt chunk alone, or several
    prompts at once) is cut into micro-batches anywhere, a prompt chunk into pieces (the later
    piece reads the earlier one's keys from the cache): one at a time and all at once, the same
    tokens as one process."""
    args = ["-t", "1", "-c", str(context), "--model-alias", "m"]
    prompts = [[(11 * i + 17 * j) % 200 + 3 for j in range(n)] for i, n in enumerate(lengths)]
    # Distinct prompts again for the concurrent round (no prefix reuse): each first token changed.
    changed = [[3 + (p[0] + 1) % 200, *p[1:]] for p in prompts]

    def run_all(server: TachyonServer) -> tuple[list[list[str]], list[list[str]]]:
        return (greedy_tokens(server, prompts, 8, 1),
                greedy_tokens(server, changed, 8, len(prompts)))

    with TachyonServer(tachyon, model, args) as server:
        reference = run_all(server)
    with MpiServer(tachyon, model, tp, pp, args, startup_timeout=300) as server:
        split = run_all(server)
    name = Path(model).stem if model else "default model"
    for index, what in enumerate(("one at a time", f"{len(prompts)} at once")):
        same = sum(a == b for a, b in zip(reference[index], split[index]))
        check(f"{name}: serve --tp {tp} --pp {pp}: {min(lengths)}-{max(lengths)}-token prompts "
              f"{what}, micro-batches cut inside prompt chunks: identical to one process "
              f"({same}/{len(prompts)})", same == len(prompts),
              [(a, b) for a, b in zip(reference[index], split[index]) if a != b][:2])


def post_json(url: str, body, headers: dict[str, str] | None = None,
              timeout: float = 120) -> tuple[int, dict]:
    """(status, JSON body) of a POST; `body` None sends none."""
    data = b"" if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


ADMIN = "sk-admin-parallel-test"


def expert_series(metrics: str, name: str) -> dict[int, float]:
    """{layer: value} of a Prometheus series with a layer label."""
    values = {}
    for match in re.finditer(name + r'\{[^}]*layer="(\d+)"[^}]*\} (\S+)', metrics):
        values[int(match.group(1))] = float(match.group(2))
    return values


def check_expert_metrics(server: MpiServer, report: dict, tp: int, pp: int) -> None:
    """/metrics' expert series hold every stage's layers (the same counts /admin/experts
    gathers), not only the leader's."""
    status, body = http_get(server.url + "/metrics", timeout=10)
    metrics = body.decode() if status == 200 else ""
    selections = expert_series(metrics, "tachyon:expert_selections_total")
    rank_imbalance = expert_series(metrics, "tachyon:expert_rank_imbalance")
    expected = {layer["layer"]: float(layer["selections"]) for layer in report.get("layers", [])}
    measured = {layer["layer"]: layer["rank_imbalance"] for layer in report.get("layers", [])
                if "rank_imbalance" in layer}
    check(f"/metrics on --tp {tp} --pp {pp}: expert_selections_total for every MoE layer of "
          f"every stage, equal to /admin/experts' counts, and each layer's rank imbalance",
          status == 200 and len(expected) >= 2 and selections == expected and
          sorted(rank_imbalance) == sorted(measured) and len(measured) >= 2 and
          all(abs(rank_imbalance[k] - v) < 1e-6 * v for k, v in measured.items()),
          (status, selections, expected, rank_imbalance, measured))


def check_rebalance(tachyon: str, model: str, tp: int, pp: int) -> None:
    """POST /admin/experts/rebalance on a running --tp 2 (--pp 2: each stage's layers) job: the experts placed anew by the
    load its requests measured, the hottest copied, each rank loading its new experts; the
    ranks' shares evener by that load; the same tokens before, across and after it; errors."""
    args = ["-t", "1", "-c", "128", "--model-alias", "m", "--admin-key", ADMIN]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with MpiServer(tachyon, model, tp, pp, args, startup_timeout=300) as server:
        rebalance = server.url + "/admin/experts/rebalance"
        before = tiny_completions(server)
        status, report = server.get_json("/admin/experts", headers=admin)
        placement = report.get("placement", {}) if status == 200 else {}
        counted = [layer["selections"] for layer in report.get("layers", [])
                   if layer["selections"] > 0]
        check(f"/admin/experts on --tp {tp} --pp {pp}: every stage's MoE layers counted, the "
              f"same tokens each", len(counted) >= 2 and len(set(counted)) == 1, report)
        check("/admin/experts on --tp 2: the placement (consecutive ids) and each layer's rank "
              "imbalance", placement == {"ranks": 2, "measured": False, "replicas": 0} and
              all(layer.get("rank_imbalance", 0) >= 1 for layer in report["layers"]
                  if layer["selections"] > 0) and
              any(layer["selections"] > 0 for layer in report["layers"]), report)
        check_expert_metrics(server, report, tp, pp)
        # Requests in flight while the experts move (the rebalance runs between two steps):
        # rounds of 8 concurrent completions from before the rebalance until after it.
        finished = threading.Event()

        def traffic() -> list[list[list[str]]]:
            rounds = [tiny_completions(server)]
            while not finished.is_set():
                rounds.append(tiny_completions(server))
            rounds.append(tiny_completions(server))
            return rounds

        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            running = pool.submit(traffic)
            time.sleep(0.2)
            status, done = post_json(rebalance, {"replicas": 1}, admin)
            finished.set()
            rounds = running.result()
        info(f"rebalance: {done}")
        check("POST /admin/experts/rebalance {replicas: 1}: 200, layers placed by their load, "
              "copies made, the ranks' shares no less even than before",
              status == 200 and done.get("object") == "expert.rebalance" and
              done["layers"] > 0 and done["replicas"] > 0 and
              1 <= done["rank_imbalance_after"] <= done["rank_imbalance_before"] and
              done["max_rank_weights_mib"] > 0, done)
        changed = [round for round in rounds if round != before]
        check(f"requests running before, across and after the rebalance ({len(rounds)} rounds of "
              f"8): the same tokens", len(rounds) >= 2 and not changed,
              [(a, b) for a, b in zip(before, changed[0]) if a != b][:2] if changed else rounds)
        after = tiny_completions(server)
        check("after the rebalance: the same tokens as before", after == before,
              [(a, b) for a, b in zip(before, after) if a != b][:2])
        status, report = server.get_json("/admin/experts", headers=admin)
        check("/admin/experts after it: the measured placement with its copies",
              status == 200 and report.get("placement") ==
              {"ranks": 2, "measured": True, "replicas": done.get("replicas")}, report)
        status, again = post_json(rebalance, None, admin)
        check("a second rebalance without a body keeps the spare slots (replicas 1) and answers",
              status == 200 and again.get("replicas", 0) > 0, again)
        for what, body, headers, expected in (
                ("replicas below 0", {"replicas": -1}, admin, 400),
                ("replicas not an integer", {"replicas": "two"}, admin, 400),
                ("an unknown field", {"experts": 3}, admin, 400),
                ("a body that is no JSON object", [1], admin, 400),
                ("no key", {}, {}, 401),
                ("a wrong key", {}, {"Authorization": "Bearer sk-wrong"}, 401)):
            status, error = post_json(rebalance, body, headers)
            check(f"rebalance with {what}: {expected} with an error message",
                  status == expected and error.get("error", {}).get("message"), (status, error))
        status, _ = http_get(rebalance, headers=admin)
        check("GET on the rebalance route: 405", status == 405, status)
        check("the job still serves the same tokens after the refusals",
              tiny_completions(server) == before)
    with TachyonServer(tachyon, model, args) as server:
        status, error = post_json(server.url + "/admin/experts/rebalance", {}, admin)
        check("rebalance in one process: 400 saying experts are placed over --tp ranks",
              status == 400 and "--tp" in error.get("error", {}).get("message", ""), error)


def check_rank_killed(tachyon: str, transport_env: dict[str, str] | None = None) -> None:
    """A rank killed mid-request: mpirun signals the others, and the leader ends its running
    requests at once, a stream with an error event (no [DONE]), a plain request with a 503."""
    import openai
    server = MpiServer(tachyon, None, 2, 1, ["-t", "1", "-c", "2048", "--model-alias", "m"],
                       transport_env=transport_env, startup_timeout=300, check_exit=False)
    over = " (over TCP)" if transport_env else ""
    with server:
        client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": "Tell a very long story."}]
        plain_error: list[Exception] = []

        def plain_request() -> None:
            try:
                client.chat.completions.create(model="m", messages=messages, temperature=0,
                                               max_tokens=1500)
            except Exception as caught:  # noqa: BLE001
                plain_error.append(caught)

        stream = client.chat.completions.create(model="m", messages=messages, temperature=0,
                                                max_tokens=1500, stream=True)
        plain = threading.Thread(target=plain_request)
        killed_at = None
        error = None
        try:
            for count, _ in enumerate(stream):
                if count == 1:
                    plain.start()
                if count == 6:
                    follower = server.rank_pids().get(1)
                    check(f"the follower rank's process was found{over}", follower is not None,
                          server.rank_pids())
                    os.kill(follower, signal.SIGKILL)
                    killed_at = time.monotonic()
        except Exception as caught:  # noqa: BLE001
            error = caught
        plain.join(timeout=60)
        info(f"the stream's client saw {type(error).__name__}: {error}")
        check(f"a rank killed mid-request: the stream ends with the server's error event{over}",
              isinstance(error, openai.APIError) and "is ending" in str(error), repr(error))
        info(f"the plain request's client saw {plain_error!r}")
        check(f"a rank killed mid-request: a plain request in flight gets a 503{over}",
              len(plain_error) == 1 and getattr(plain_error[0], "status_code", None) == 503,
              plain_error)
        deadline = time.monotonic() + 30
        while server.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        ended = server.process.poll() is not None
        check(f"the job ended within seconds of the kill{over} "
              f"({time.monotonic() - (killed_at or time.monotonic()):.1f} s)", ended)
        check(f"mpirun reports the failure (non-zero exit){over}",
              ended and server.process.returncode != 0,
              server.process.returncode)


def check_mpirun_stopped(tachyon: str) -> None:
    """SIGTERM to mpirun (as an orchestrator stops a job): it signals every rank and kills them a
    second later, so the leader ends a running stream at once with its error event."""
    import openai
    server = MpiServer(tachyon, None, 2, 1, ["-t", "1", "-c", "2048", "--model-alias", "m"],
                       startup_timeout=300, check_exit=False)
    with server:
        client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=60)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Tell a very long story."}],
            temperature=0, max_tokens=1500, stream=True)
        error = None
        try:
            for count, _ in enumerate(stream):
                if count == 4:
                    server.process.send_signal(signal.SIGTERM)
        except Exception as caught:  # noqa: BLE001
            error = caught
        info(f"the client saw {type(error).__name__}: {error}")
        check("SIGTERM to mpirun mid-stream: the stream ends with the server's error event",
              isinstance(error, openai.APIError) and "is ending" in str(error), repr(error))
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        check("SIGTERM to mpirun: the job ends", server.process.poll() is not None,
              "still running after 30 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--tiny-models", required=True)
    args = parser.parse_args()
    tiny = Path(args.tiny_models)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as text:
        text.write((CORPUS / "tinyshakespeare.txt").read_text()[:20000])
    layouts = [(2, 1), (1, 2), (2, 2)]
    section("errors", check_errors, args.tachyon, tiny)
    # Tiny random models: each architecture feature through the splits that take it (expert
    # layers: the routed experts split over the TP ranks; MLA: the query heads split, the
    # latent on every rank; DeepSeek-V2-Lite's queries without q_lora and its kv_b tensor).
    tiny_cases = [("llama_gqa", layouts), ("qwen2_bias_tied", [(2, 1)]),
                  ("qwen3_qknorm", [(2, 1)]), ("gemma3_tiny", [(2, 1), (1, 2)]),
                  ("qwen3_moe_tiny", layouts), ("mixtral_tiny", [(2, 1)]),
                  ("qwen2_moe_tiny", [(2, 1)]), ("deepseek_v3_groups", layouts),
                  ("deepseek_v2_lite", [(2, 1)]), ("kimi_k2_tiny", [(2, 1)])]
    for name, cases in tiny_cases:
        section(name, check_perplexity, args.tachyon, f"tiny {name}",
                str(tiny / f"{name}.f32.gguf"), text.name, cases)
    # 512 tokens: two of the default model's 256-token windows per layout (at -t 1 on 4 ranks
    # sharing 2 cores, every 512 tokens more cost ~1.4 s per layout).
    section("default model", check_perplexity, args.tachyon, "default model", None, text.name,
            layouts, 512)
    section("quantized exchange", check_quantized_exchange, args.tachyon, tiny, text.name)
    section("expert placement", check_expert_placement, args.tachyon, tiny, text.name)
    section("expert exchange", check_expert_exchange, args.tachyon, tiny, text.name)
    section("MLA attention paths", check_mla_attention, args.tachyon, tiny, text.name)
    section("memory", check_memory)
    section("tcp", check_tcp, args.tachyon, tiny, text.name, layouts)
    section("serving", check_serving, args.tachyon, layouts)
    section("serving MLA", check_serving_tiny, args.tachyon,
            str(tiny / "deepseek_v3_groups.f32.gguf"), 2, 2)
    # Decode steps of 1-8 tokens over 2 ranks: a rank may sum no token.
    section("serving MLA, all-to-all", check_serving_tiny, args.tachyon,
            str(tiny / "deepseek_v3_groups.f32.gguf"), 2, 1, ["--expert-exchange", "all-to-all"])
    # Micro-batches cut inside prompt chunks: the tiny models' 128-token context takes 4
    # prompts of 60-118 tokens at once; the default model's long prompts alone.
    section("serving long prompts", check_serving_long_prompts, args.tachyon, None, 1, 2, 1024,
            [130, 300, 420])
    for name, (tp, pp) in (("llama_gqa", (1, 2)), ("gemma3_tiny", (1, 2)),
                           ("deepseek_v3_groups", (2, 2))):
        section(f"serving long prompts, {name}", check_serving_long_prompts, args.tachyon,
                str(tiny / f"{name}.f32.gguf"), tp, pp, 128, [60, 90, 104, 118])
    section("rebalance", check_rebalance, args.tachyon, str(tiny / "deepseek_v3_groups.f32.gguf"),
            2, 1)
    section("rebalance, 2 stages", check_rebalance, args.tachyon,
            str(tiny / "qwen3_moe_tiny.f32.gguf"), 2, 2)
    section("rank killed", check_rank_killed, args.tachyon)
    section("rank killed, over TCP", check_rank_killed, args.tachyon, TCP_ENV)
    section("mpirun stopped", check_mpirun_stopped, args.tachyon)
    os.unlink(text.name)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
