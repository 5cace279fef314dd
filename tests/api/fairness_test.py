#!/usr/bin/env python3
"""Two keys in the same tier share the engine fairly: a heavy tenant does not starve a light one.

1. B alone: B_REQUESTS streaming chat requests, one after another, each with its own ~160-token
   prompt (so the prefix cache cannot help) and max_tokens 16; time to first token (TTFT) =
   from sending to the first content chunk. B hangs up at its first token (the rest of its
   stream says nothing about TTFT, and under load would take most of the test's time).
2. A floods: A_STREAMS parallel streams of ~300-token prompts with max_tokens 64, back to back
   (started over A_RAMP_SECONDS, then steady): A always has more work queued than the engine
   can do. Once A fills the engine, its served rate (prompt + completion tokens per second of
   its finished requests) is measured, and B sends B_REQUESTS requests at random (Poisson)
   times, at a mean rate that makes A's load at least LOAD_RATIO× B's in tokens (issue 5: "when
   tenant A sends 10× tenant B's load"). B's requests arrive at any point of an engine step,
   as real traffic does.
3. B alone once more after the flood (the speed of a shared machine drifts; "alone" is the
   median of both runs).
4. Issue 5's criterion: B's median TTFT under A's load ≤ 2× B's median TTFT alone (printed;
   asserted with a guard of 3×), and what holds on any machine: B's median TTFT under load is
   at most 2.5 engine steps (mean step time while B ran) longer than alone. Also
   printed: A's load over B's as measured, B's queue time and TTFT as the server saw them
   (usage ledger), and the engine's step sizes meanwhile.

The server runs with -t 2 (the test machines have 2 cores); the whole test takes ~1 minute
(~9 under the sanitizers: B's rate follows A's served rate).

    .venv/bin/python tests/api/fairness_test.py --tachyon build/tachyon [--model M.gguf]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_fixture import TachyonServer, parse_prometheus, parse_prometheus_samples  # noqa: E402
from gateway_util import KeysCli, bearer, fetch_metrics_text, httpx  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"
B_REQUESTS = 8
B_PROMPT_TOKENS = 160
B_MAX_TOKENS = 16
A_STREAMS = 20
A_PROMPT_TOKENS = 300
A_MAX_TOKENS = 64
LOAD_RATIO = 10.0  # A's load ≥ this × B's (issue 5)
# B's mean rate is set this much lower than LOAD_RATIO alone would allow: A's rate measured
# before B starts overstates it while B runs (B's requests share the engine). Once, when ctest
# still ran other tests beside this one, 1391 tokens/s before, 927 while B ran (9.8x at 1.5);
# run alone (RUN_SERIAL), 2.0 gave 17.5x on a 2-core Zen 3, so 1.5 leaves ~30% to spare and
# B's phase (≈ B_REQUESTS x the mean interval) takes a quarter less.
B_RATE_MARGIN = 1.5
# Issue 5's target, B's median TTFT under A's load ≤ 2× alone, is a wall-clock ratio that a
# slower machine moves (its steps take longer while B alone waits for no step): it is measured
# and printed (docs/benchmarks.md keeps it), and the test asserts it only with a generous guard.
TARGET_RATIO = 2.0
GUARD_RATIO = 3.0
# What the test holds on any machine: how much longer B waits for its first token under load
# than alone, in engine steps (the mean step time while B ran). A fair scheduler starts B's
# prompt in the step after it arrives: B waits out the step running when it arrives, and its
# own step is longer than alone (A's work shares it), about 1-1.5 steps more in all; first
# come, first served would make it wait for A's whole queue (dozens of steps).
MAX_EXTRA_STEPS = 2.5
A_RAMP_SECONDS = 5.0  # A's streams start one after another over this long
LOAD_WARMUP_SECONDS = 20.0  # at most this long for A to fill the engine
A_RATE_SECONDS = 5.0  # A's served rate is measured over this long before B starts

from checks import results, check, info, exit_status  # noqa: E402


class Prompts:
    """Distinct excerpts of tinyshakespeare of about n tokens (chars per token measured once)."""

    def __init__(self, http, secret: str, seed: int):
        self.text = SHAKESPEARE.read_text() if SHAKESPEARE.exists() else \
            " ".join(f"word{i} lorem ipsum dolor" for i in range(50_000))
        self.rng = random.Random(seed)
        self.lock = threading.Lock()  # make() is called from several threads
        sample = self.text[:4000]
        tokens = http.post("/tokenize", json={"content": sample},
                           headers=bearer(secret)).json()["tokens"]
        self.chars_per_token = len(sample) / max(1, len(tokens))

    def make(self, tokens: int, tag: str) -> str:
        length = int(tokens * self.chars_per_token)
        with self.lock:
            start = self.rng.randrange(0, len(self.text) - length - 1)
        # The tag first, so no two prompts share a prefix beyond the chat template.
        return f"[{tag}] Continue this scene:\n" + self.text[start:start + length]


def stream_ttft(client, model: str, secret: str, prompt: str, max_tokens: int,
                hang_up: bool = False, stop: threading.Event | None = None) -> tuple:
    """(TTFT seconds or None, status, completion chunks) of one streaming chat request;
    hang_up: close the connection at the first token (the server cancels the rest); stop:
    close it once this is set."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.8, "stream": True,
            "messages": [{"role": "user", "content": prompt}]}
    start = time.monotonic()
    ttft, chunks = None, 0
    with client.stream("POST", "/v1/chat/completions", json=body,
                       headers=bearer(secret)) as response:
        if response.status_code != 200:
            response.read()
            return None, response.status_code, 0
        for line in response.iter_lines():
            if stop is not None and stop.is_set():
                break
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data.strip() == "[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices", []):
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.monotonic() - start
                    if hang_up:
                        return ttft, 200, chunks
    return ttft, 200, chunks


def run_b(url: str, model: str, secret: str, prompts: Prompts, label: str) -> list[float]:
    ttfts, problems = [], []
    with httpx.Client(base_url=url, timeout=300) as client:
        for i in range(B_REQUESTS):
            ttft, status, _ = stream_ttft(client, model, secret,
                                          prompts.make(B_PROMPT_TOKENS, f"B {label} {i}"),
                                          B_MAX_TOKENS, hang_up=True)
            if ttft is None:
                problems.append(status)
            else:
                ttfts.append(ttft)
    check(f"B {label}: all {B_REQUESTS} requests streamed tokens", not problems, problems)
    info(f"B {label}: TTFT ms " + " ".join(f"{t * 1000:.0f}" for t in ttfts))
    return ttfts


def run_b_at_random_times(url: str, model: str, secret: str, prompts: Prompts, label: str,
                          mean_interval: float, rng: random.Random) -> list[float]:
    """B_REQUESTS requests sent at random times, each on its own connection, whether or not the
    previous one has answered: exponential gaps (Poisson arrivals) scaled so that they average
    exactly mean_interval seconds (ten draws alone would make B's load swing by ±30%)."""
    results_lock = threading.Lock()
    ttfts, problems = [], []

    def send(i: int) -> None:
        prompt = prompts.make(B_PROMPT_TOKENS, f"B {label} {i}")
        try:
            with httpx.Client(base_url=url, timeout=300) as client:
                ttft, status, _ = stream_ttft(client, model, secret, prompt, B_MAX_TOKENS,
                                              hang_up=True)
        except Exception as error:  # noqa: BLE001
            ttft, status = None, f"{type(error).__name__}: {error}"
        with results_lock:
            (problems.append(status) if ttft is None else ttfts.append(ttft))

    gaps = [rng.expovariate(1.0) for _ in range(B_REQUESTS)]
    gaps = [gap * mean_interval * B_REQUESTS / sum(gaps) for gap in gaps]
    threads = []
    for i, gap in enumerate(gaps):
        time.sleep(gap)
        threads.append(threading.Thread(target=send, args=(i,)))
        threads[-1].start()
    for thread in threads:
        thread.join(timeout=300)
    check(f"B {label}: all {B_REQUESTS} requests streamed tokens", not problems, problems)
    info(f"B {label}: TTFT ms " + " ".join(f"{t * 1000:.0f}" for t in ttfts))
    return ttfts


def key_tokens(url: str, secret: str, key_name: str) -> float:
    """Prompt + completion tokens of key_name's finished requests so far (/metrics)."""
    return sum(value for name, labels, value in
               parse_prometheus_samples(fetch_metrics_text(url, secret))
               if name == "tachyon:key_tokens_total" and labels.get("key") == key_name)


def engine_tokens(url: str, secret: str) -> float:
    """Tokens the engine has computed so far (prompt chunks and decodes of every request)."""
    return parse_prometheus(fetch_metrics_text(url, secret)).get("tachyon:iteration_tokens_sum",
                                                                  0.0)


def ledger_latencies(db: Path, key_name: str, since_unix: float) -> list[tuple[float, float]]:
    """(queue seconds, TTFT seconds) of key_name's requests in the usage ledger since then."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as connection:
        return connection.execute(
            "SELECT queue_seconds, ttft_seconds FROM usage WHERE key_name = ? AND unix_time >= ?",
            (key_name, int(since_unix))).fetchall()


class Flood:
    def __init__(self, url: str, model: str, secret: str, prompts: Prompts):
        self.url, self.model, self.secret, self.prompts = url, model, secret, prompts
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.finished = 0
        self.tokens = 0
        self.refused: list[int] = []
        self.ttfts: list[tuple[float, float]] = []  # (when sent, TTFT) of A's streams
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._stream, args=(i,)) for i in range(A_STREAMS)]

    def start(self) -> "Flood":
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=300)

    def _stream(self, index: int) -> None:
        n = 0
        # Staggered starts, so the streams are spread over prefill and decode as in a steady
        # flood rather than all prefilling at once.
        if self.stopping.wait(index * A_RAMP_SECONDS / A_STREAMS):
            return
        with httpx.Client(base_url=self.url, timeout=300) as client:
            while not self.stopping.is_set():
                n += 1
                with self.lock:
                    prompt = self.prompts.make(A_PROMPT_TOKENS, f"A {index} {n}")
                sent = time.monotonic()
                try:
                    ttft, status, chunks = stream_ttft(client, self.model, self.secret, prompt,
                                                       A_MAX_TOKENS, stop=self.stopping)
                except Exception as error:  # noqa: BLE001
                    with self.lock:
                        self.errors.append(f"{type(error).__name__}: {error}")
                    continue
                with self.lock:
                    if status != 200:
                        self.refused.append(status)
                    else:
                        self.finished += 1
                        self.tokens += chunks
                        if ttft is not None:
                            self.ttfts.append((sent, ttft))


def run(tachyon: str, model: str | None, work: Path, extra_args: list[str]) -> None:
    db = work / "tachyon.db"
    cli = KeysCli(tachyon, str(db))
    # Same tier; no rate limits, so nothing but the scheduler stands between A and B.
    secret_a = cli.create("tenant-a", tier="standard", rpm=0, tpm=0, concurrency=0)["key"]
    secret_b = cli.create("tenant-b", tier="standard", rpm=0, tpm=0, concurrency=0)["key"]
    server = TachyonServer(tachyon, model, check_exit=False,
                           args=["-t", "2", "-c", "2048", "--auth", "db", "--db", str(db),
                                 *extra_args])
    with server:
        http = httpx.Client(base_url=server.url, timeout=300)
        model_id = http.get("/v1/models", headers=bearer(secret_b)).json()["data"][0]["id"]
        prompts_b = Prompts(http, secret_b, seed=1)
        prompts_a = Prompts(http, secret_a, seed=2)
        # Warm-up (first-touch costs of the model and the KV pool), not measured.
        stream_ttft(http, model_id, secret_b, prompts_b.make(B_PROMPT_TOKENS, "warm"), 4)

        b_tokens_before = key_tokens(server.url, secret_b, "tenant-b")
        started = time.monotonic()
        alone = run_b(server.url, model_id, secret_b, prompts_b, "alone")
        info(f"B alone took {time.monotonic() - started:.1f} s")
        b_tokens_per_request = (key_tokens(server.url, secret_b, "tenant-b") -
                                b_tokens_before) / B_REQUESTS

        flood = Flood(server.url, model_id, secret_a, prompts_a).start()
        try:
            time.sleep(A_RAMP_SECONDS + 1.0)
            deadline = time.monotonic() + LOAD_WARMUP_SECONDS
            busy = 0.0
            while time.monotonic() < deadline:
                values = parse_prometheus(fetch_metrics_text(server.url, secret_a))
                busy = values.get("tachyon:num_requests_running", 0) + \
                    values.get("tachyon:num_requests_waiting", 0)
                if busy >= A_STREAMS * 0.9:
                    break
                time.sleep(0.2)
            info(f"A's flood: {busy:.0f} requests running or waiting when B starts")
            check(f"A keeps ~{A_STREAMS} requests in the engine", busy >= A_STREAMS * 0.9, busy)
            # A's served rate sets B's: B's tokens per second ≤ A's / LOAD_RATIO (with a margin).
            # (Tokens the engine computed: A's requests take ~20 s each, too long to count
            # finished ones over a few seconds.)
            a_tokens, measured_from = engine_tokens(server.url, secret_a), time.monotonic()
            time.sleep(A_RATE_SECONDS)
            a_rate = (engine_tokens(server.url, secret_a) - a_tokens) / \
                (time.monotonic() - measured_from)
            check("A's requests finish under its own flood", a_rate > 0, a_rate)
            mean_interval = LOAD_RATIO * B_RATE_MARGIN * b_tokens_per_request / max(a_rate, 1.0)
            info(f"A is served {a_rate:.0f} tokens/s; B's requests are {b_tokens_per_request:.0f} "
                 f"tokens each: B sends one every {mean_interval:.2f} s on average")

            before = parse_prometheus(fetch_metrics_text(server.url, secret_a))
            all_tokens, b_tokens = (engine_tokens(server.url, secret_a),
                                    key_tokens(server.url, secret_b, "tenant-b"))
            started = time.monotonic()
            loaded = run_b_at_random_times(server.url, model_id, secret_b, prompts_b,
                                           "under A's load", mean_interval, random.Random(3))
            took = time.monotonic() - started
            ledger_b = ledger_latencies(db, "tenant-b", since_unix=time.time() - took - 1)
            values = parse_prometheus(fetch_metrics_text(server.url, secret_a))
            b_tokens = key_tokens(server.url, secret_b, "tenant-b") - b_tokens
            a_tokens = engine_tokens(server.url, secret_a) - all_tokens - b_tokens
            busy_after = values.get("tachyon:num_requests_running", 0) + \
                values.get("tachyon:num_requests_waiting", 0)
        finally:
            flood.stop()
        # B alone once more: the machine's speed drifts (other processes share its 2 cores), so
        # "alone" is the median of runs before and after the flood.
        alone_after = run_b(server.url, model_id, secret_b, prompts_b, "alone again")
        if alone and alone_after:
            info(f"B alone: median {statistics.median(alone) * 1000:.0f} ms before the flood, "
                 f"{statistics.median(alone_after) * 1000:.0f} ms after")
        alone = alone + alone_after
        a_ttfts = [t for sent, t in flood.ttfts if started <= sent]
        steps = values.get("tachyon:engine_steps_total", 0) - \
            before.get("tachyon:engine_steps_total", 0)
        step_tokens = values.get("tachyon:iteration_tokens_sum", 0) - \
            before.get("tachyon:iteration_tokens_sum", 0)
        if steps > 0:
            info(f"while B ran the engine ran {steps:.0f} steps of {step_tokens / steps:.0f} "
                 f"tokens on average, {took / steps * 1000:.0f} ms each")
        info(f"B under load took {took:.1f} s; A finished {flood.finished} streams "
             f"({flood.tokens} content chunks) in all, {busy_after:.0f} still in the engine "
             f"at the end")
        check(f"A's load was ≥ {LOAD_RATIO:g}× B's while B ran",
              b_tokens > 0 and a_tokens >= LOAD_RATIO * b_tokens,
              f"A {a_tokens:.0f} tokens, B {b_tokens:.0f}")
        info(f"while B ran: the engine computed {a_tokens:.0f} tokens for A, B's requests had "
             f"{b_tokens:.0f} (×{a_tokens / max(b_tokens, 1):.1f})")
        if a_ttfts:
            info(f"A's median TTFT meanwhile: {statistics.median(a_ttfts) * 1000:.0f} ms "
                 f"({len(a_ttfts)} of its streams started and got a token while B ran)")
        if ledger_b:
            queue = statistics.median(q for q, _ in ledger_b)
            server_ttft = statistics.median(t for _, t in ledger_b)
            info(f"B under load, as the server saw it (usage ledger, {len(ledger_b)} rows): "
                 f"median queue {queue * 1000:.0f} ms, median TTFT {server_ttft * 1000:.0f} ms")
        check("A's flood was never refused (no limits on its key)",
              not flood.refused and not flood.errors, (flood.refused[:5], flood.errors[:3]))
        if alone and loaded:
            median_alone = statistics.median(alone)
            median_loaded = statistics.median(loaded)
            ratio = median_loaded / median_alone if median_alone > 0 else float("inf")
            print(f"B median TTFT alone: {median_alone * 1000:.0f} ms; under A's "
                  f"{A_STREAMS}-stream flood: {median_loaded * 1000:.0f} ms (×{ratio:.2f})")
            info(f"issue 5's target, ≤ {TARGET_RATIO:g}× alone: "
                 f"{'met' if ratio <= TARGET_RATIO else 'NOT met'} (×{ratio:.2f})")
            check(f"B's median TTFT under A's flood ≤ {GUARD_RATIO:g}× alone (the guard)",
                  ratio <= GUARD_RATIO,
                  f"{median_loaded * 1000:.0f} ms vs {median_alone * 1000:.0f} ms (×{ratio:.2f})")
            if steps > 0:
                step_seconds = took / steps
                extra_steps = (median_loaded - median_alone) / step_seconds
                check(f"B's median TTFT under A's flood is at most {MAX_EXTRA_STEPS:g} engine "
                      f"steps longer than alone", extra_steps <= MAX_EXTRA_STEPS,
                      f"{extra_steps:.2f} steps of {step_seconds * 1000:.0f} ms")
                info(f"B's median TTFT under load: {extra_steps:.2f} mean engine steps more than "
                     f"alone ({median_loaded / step_seconds:.2f} steps in all)")
        if results["failed"]:
            server.dump_stderr("some checks failed", last_lines=30)
    check("server exits 0 on SIGTERM", server.returncode == 0, server.returncode)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", help="GGUF file (default: tachyon's default model)")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra `tachyon serve` argument (repeatable)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tachyon-fairness-test-"))
    started = time.monotonic()
    try:
        run(args.tachyon, args.model, work, args.server_arg)
    except Exception as error:  # noqa: BLE001
        check("fairness test ran without raising", False,
              f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=6)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info(f"total {time.monotonic() - started:.0f} s")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
