#!/usr/bin/env python3
"""Long conversations through the HTTP API with the official openai client: with
`context_overflow: "truncate"` (per request, or the server's `--context-overflow truncate`) a chat
that outgrows the context drops its oldest turns instead of failing, says how many tokens and
messages went (usage.prompt_tokens_details and x-dropped-* headers, streamed or not), and a
scripted 200-turn conversation never errors while every prompt stays within the context; the
default stays OpenAI's 400 context_length_exceeded; values tachyon does not know are a 400.
With `"sink"` (StreamingLLM) a chat longer than the context is answered from its first block
and a recent window, generation runs on past the context, and KV memory stays within one
context per request (sampled from /metrics while it runs), over 200 turns too. On a
sliding-window model (Gemma 3 270M, fetched by `make setup`) sink generation runs past the
context too, the same greedy text alone and beside a copy sharing its prompt's blocks.

    .venv/bin/python tests/api/context_overflow_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from server_fixture import TachyonServer, http_get, parse_prometheus  # noqa: E402

CONTEXT = 128
GEMMA = (Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache/tachyon")) / "models" /
         "gemma-3-270m-q4_k_m.gguf")
ENDLESS_CONTEXT = 64  # the 200-turn chats: 200 prompts each, so kept short
ONE_THREAD = ["-t", "1"]  # two servers run side by side on the test machines' 2 cores
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
FILLER = ("Tell me about the history of the lighthouse on the northern cliffs, its keepers, the "
          "storms it weathered and the ships it saved. ")


def client_for(server: TachyonServer) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0)
    return client, client.models.list().data[0].id


def long_chat(turns: int) -> list[dict]:
    messages = [SYSTEM]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: " + FILLER})
        messages.append({"role": "assistant", "content": f"Answer {i}: it is a long story."})
    messages.append({"role": "user", "content": "And what happened last winter?"})
    return messages


def dropped(usage) -> tuple[int, int]:
    details = usage.prompt_tokens_details.model_extra or {}
    return details.get("dropped_tokens", 0), details.get("dropped_messages", 0)


def check_per_request(server: TachyonServer) -> None:
    client, model = client_for(server)
    messages = long_chat(8)
    try:
        client.chat.completions.create(model=model, messages=messages, max_tokens=16)
        check("default policy: a too long chat is context_length_exceeded", False, "no error")
    except openai.BadRequestError as error:
        check("default policy: a too long chat is context_length_exceeded",
              error.code == "context_length_exceeded" and error.param == "messages", error.body)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages, max_tokens=16, temperature=0,
        extra_body={"context_overflow": "truncate"})
    answer = raw.parse()
    tokens, count = dropped(answer.usage)
    info(f"truncate: prompt {answer.usage.prompt_tokens} tokens, dropped {tokens} tokens in "
         f"{count} messages")
    check("truncate: answered within the context, leaving room for max_tokens",
          answer.choices[0].message.content and
          answer.usage.prompt_tokens + 16 <= CONTEXT, answer.usage)
    check("truncate: whole turns dropped, counted in usage",
          tokens > 0 and count > 0 and count % 2 == 0, answer.usage)
    check("truncate: x-dropped-prompt-tokens / x-dropped-messages headers",
          raw.headers.get("x-dropped-prompt-tokens") == str(tokens) and
          raw.headers.get("x-dropped-messages") == str(count), dict(raw.headers))
    # Greedy: the same as sending only what was kept.
    kept = [SYSTEM] + messages[1 + count:]
    direct = client.chat.completions.create(model=model, messages=kept, max_tokens=16,
                                            temperature=0)
    check("truncate: the answer is the one to the kept messages",
          direct.choices[0].message.content == answer.choices[0].message.content and
          direct.usage.prompt_tokens == answer.usage.prompt_tokens,
          (direct.choices[0].message.content, answer.choices[0].message.content))
    # Streamed: headers before the first byte, the counts in the usage chunk.
    with client.chat.completions.with_streaming_response.create(
            model=model, messages=messages, max_tokens=8, stream=True,
            stream_options={"include_usage": True},
            extra_body={"context_overflow": "truncate"}) as response:
        header = response.headers.get("x-dropped-prompt-tokens")
        chunks = list(response.parse())
    usage = chunks[-1].usage
    check("truncate, streamed: header and usage chunk agree",
          usage is not None and header == str(dropped(usage)[0]) and dropped(usage)[0] > 0,
          (header, usage))
    # What never fits: the system message and the last user turn alone.
    huge = [SYSTEM, {"role": "user", "content": FILLER * 12}]
    try:
        client.chat.completions.create(model=model, messages=huge, max_tokens=16,
                                       extra_body={"context_overflow": "truncate"})
        check("truncate: a last turn that cannot fit is context_length_exceeded", False, "200")
    except openai.BadRequestError as error:
        check("truncate: a last turn that cannot fit is context_length_exceeded",
              error.code == "context_length_exceeded" and "last user turn alone" in str(error),
              error.body)
    # Completions: the oldest prompt tokens go.
    text = client.completions.create(model=model, prompt=FILLER * 10, max_tokens=8,
                                     extra_body={"context_overflow": "truncate"})
    check("truncate, completions: the prompt's oldest tokens dropped, room left for max_tokens",
          text.usage.prompt_tokens == CONTEXT - 8 and dropped(text.usage)[0] > 0, text.usage)
    for value, says in (("bogus", "must be"), ("", "must be")):
        try:
            client.chat.completions.create(model=model, messages=messages[:2], max_tokens=4,
                                           extra_body={"context_overflow": value})
            check(f"context_overflow {value!r} refused", False, "200")
        except openai.BadRequestError as error:
            check(f"context_overflow {value!r} refused with a 400 naming the field",
                  error.param == "context_overflow" and says in str(error), error.body)


def chat_200_turns(server: TachyonServer) -> tuple[int, list]:
    """A scripted 200-turn chat with the server's default overflow policy: the number of
    failed turns and each answered turn's usage."""
    client, model = client_for(server)
    messages = [SYSTEM]
    errors, usages = 0, []
    for turn in range(200):
        messages.append({"role": "user", "content": f"Turn {turn}. " + FILLER[:30 + turn % 30]})
        try:
            answer = client.chat.completions.create(model=model, messages=messages, max_tokens=4,
                                                    temperature=0)
        except openai.APIError as error:
            errors += 1
            info(f"turn {turn}: {error}")
            messages.append({"role": "assistant", "content": "(error)"})
            continue
        usages.append(answer.usage)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
    return errors, usages


class PeakBlocks:
    """Samples tachyon:kv_cache_blocks_used every 20 ms while in a `with` block."""

    def __init__(self, server: TachyonServer):
        self.server, self.peak, self._stop = server, 0.0, threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            status, body = http_get(self.server.url + "/metrics")
            if status == 200:
                used = parse_prometheus(body.decode()).get("tachyon:kv_cache_blocks_used", 0)
                self.peak = max(self.peak, used)
            time.sleep(0.02)

    def __enter__(self) -> "PeakBlocks":
        self._thread = threading.Thread(target=self._run)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def check_sink(server: TachyonServer) -> None:
    """`context_overflow: "sink"` (StreamingLLM): a chat longer than the context is answered
    from its first block and a recent window; generation runs on past the context in bounded
    KV memory; usage says how many tokens left the cache."""
    client, model = client_for(server)
    messages = long_chat(8)
    answer = client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                            temperature=0, extra_body={"context_overflow": "sink"})
    tokens, _ = dropped(answer.usage)
    info(f"sink: prompt {answer.usage.prompt_tokens} tokens, {tokens} left the cache")
    check("sink: a chat longer than the context is answered",
          answer.choices[0].message.content and answer.usage.prompt_tokens > CONTEXT,
          answer.usage)
    check("sink: usage counts the tokens cut from the prompt",
          tokens >= answer.usage.prompt_tokens - CONTEXT, answer.usage)
    # Generation past the context: 3x the context in one answer, streamed, in bounded memory.
    with PeakBlocks(server) as blocks:
        stream = client.completions.create(
            model=model, prompt="Once upon a time", max_tokens=3 * CONTEXT, temperature=0.8,
            seed=7, stream=True, stream_options={"include_usage": True},
            extra_body={"context_overflow": "sink", "ignore_eos": True})
        chunks = list(stream)
    usage = chunks[-1].usage
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    info(f"sink: {usage.completion_tokens} tokens generated in a {CONTEXT}-token context, "
         f"{dropped(usage)[0]} dropped, at most {blocks.peak:.0f} KV blocks in use")
    check("sink: generation runs on past the context (3x), finishing by length",
          usage.completion_tokens == 3 * CONTEXT and chunks[-2].choices[0].finish_reason ==
          "length" and len(text) > 3 * CONTEXT, usage)
    check("sink: the tokens dropped from the cache are counted",
          dropped(usage)[0] >= 2 * CONTEXT - 16, usage)
    check("sink: KV blocks in use never past one context's worth",
          0 < blocks.peak <= CONTEXT // 16 + 1, blocks.peak)
    # Without sink the same request is refused as before.
    try:
        client.completions.create(model=model, prompt="Once upon a time", max_tokens=3 * CONTEXT)
        check("without sink: max_tokens past the context is context_length_exceeded", False,
              "200")
    except openai.BadRequestError as error:
        check("without sink: max_tokens past the context is context_length_exceeded",
              error.code == "context_length_exceeded", error.body)


def check_sink_window_model(server: TachyonServer) -> None:
    """Sink on Gemma 3 (local layers with their own RoPE and KV pool): generation runs past the
    context, and a greedy answer is the same alone and beside a copy of it (which shares its
    prompt's blocks until the first drop copies them)."""
    client, model = client_for(server)

    def answer() -> object:
        return client.completions.create(
            model=model, prompt="The lighthouse keeper wrote in his log that", max_tokens=2 *
            CONTEXT, temperature=0, extra_body={"context_overflow": "sink", "ignore_eos": True})

    with PeakBlocks(server) as blocks:
        alone = answer()
    info(f"Gemma 3, sink: {alone.usage.completion_tokens} tokens in a {CONTEXT}-token context, "
         f"{dropped(alone.usage)[0]} dropped, at most {blocks.peak:.0f} KV blocks in use")
    check("Gemma 3, sink: generation runs on past the context (2x)",
          alone.usage.completion_tokens == 2 * CONTEXT and
          dropped(alone.usage)[0] >= CONTEXT - 16, alone.usage)
    check("Gemma 3, sink: KV blocks in use never past one context's worth",
          0 < blocks.peak <= CONTEXT // 16 + 1, blocks.peak)
    results: list = [None, None]

    def run(i: int) -> None:
        results[i] = answer()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check("Gemma 3, sink: the same greedy text alone and beside a copy",
          all(r is not None and r.choices[0].text == alone.choices[0].text for r in results),
          [r.choices[0].text[:80] if r else None for r in results])


def check_endless_chat_sink(server: TachyonServer) -> None:
    """200 turns with the server's default set to sink: no error, conversations longer than the
    context answered, KV memory bounded by one context per request."""
    with PeakBlocks(server) as blocks:
        errors, usages = chat_200_turns(server)
    longest = max((usage.prompt_tokens for usage in usages), default=0)
    most_dropped = max((dropped(usage)[0] for usage in usages), default=0)
    info(f"200 turns with sink: longest conversation {longest} tokens, up to {most_dropped} "
         f"left the cache, at most {blocks.peak:.0f} KV blocks in use")
    check("200-turn chat with --context-overflow sink: no request failed", errors == 0, errors)
    check("200-turn chat (sink): conversations far past the context answered",
          longest > 10 * ENDLESS_CONTEXT and most_dropped >= longest - ENDLESS_CONTEXT,
          (longest, most_dropped))
    check("200-turn chat (sink): KV blocks in use never past one context's worth",
          0 < blocks.peak <= ENDLESS_CONTEXT // 16 + 1, blocks.peak)


def check_endless_chat(server: TachyonServer) -> None:
    """200 turns with the server's default set to truncate: no error, every prompt within the
    context, and the KV pool never more than full."""
    errors, usages = chat_200_turns(server)
    worst_prompt = max((usage.prompt_tokens for usage in usages), default=0)
    dropped_turns = max((dropped(usage)[1] // 2 for usage in usages), default=0)
    status, body = http_get(server.url + "/metrics")
    metrics = parse_prometheus(body.decode())
    info(f"200 turns: longest prompt {worst_prompt} tokens, up to {dropped_turns} turns dropped, "
         f"KV blocks used {metrics['tachyon:kv_cache_blocks_used']} of "
         f"{metrics['tachyon:kv_cache_blocks_total']}")
    check("200-turn chat with --context-overflow truncate: no request failed", errors == 0, errors)
    check("200-turn chat: every prompt within the context with room for max_tokens",
          0 < worst_prompt <= ENDLESS_CONTEXT - 4, worst_prompt)
    check("200-turn chat: the oldest turns were dropped", dropped_turns > 5, dropped_turns)
    check("200-turn chat: KV blocks in use within the pool",
          metrics["tachyon:kv_cache_blocks_used"] <= metrics["tachyon:kv_cache_blocks_total"],
          metrics)


def run_truncate(tachyon: str) -> None:
    with TachyonServer(tachyon, args=[*ONE_THREAD, "-c", str(CONTEXT), "--kv-cache-mem",
                                      "64MiB"]) as server:
        section("per request", check_per_request, server)
    with TachyonServer(tachyon, args=[*ONE_THREAD, "-c", str(ENDLESS_CONTEXT), "--kv-cache-mem",
                                      "64MiB", "--context-overflow", "truncate"]) as server:
        section("endless chat", check_endless_chat, server)
    # (here: the truncate half ends sooner)
    with TachyonServer(tachyon, model=str(GEMMA), args=[*ONE_THREAD, "-c", str(CONTEXT),
                                                        "--kv-cache-mem", "64MiB"]) as server:
        section("sink on a sliding-window model", check_sink_window_model, server)


def run_sink(tachyon: str) -> None:
    with TachyonServer(tachyon, args=[*ONE_THREAD, "-c", str(CONTEXT), "--kv-cache-mem",
                                      "64MiB"]) as server:
        section("sink", check_sink, server)
    with TachyonServer(tachyon, args=[*ONE_THREAD, "-c", str(ENDLESS_CONTEXT), "--kv-cache-mem",
                                      "64MiB", "--context-overflow", "sink"]) as server:
        section("endless chat (sink)", check_endless_chat_sink, server)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    args = parser.parse_args()
    # The truncate and the sink halves side by side, a one-thread server each: a 200-turn chat
    # waits on its client between turns, so one at a time left a core idle.
    runs = [threading.Thread(target=section, args=(name, run, args.tachyon))
            for name, run in (("truncate servers", run_truncate), ("sink servers", run_sink))]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
