#!/usr/bin/env python3
"""`tachyon serve` driven by the official openai client (and raw HTTP where the client hides
the wire): chat and completions, streaming and not, usage, stop sequences, token caps,
logprobs, seeds, /v1/models, /tokenize, the prefix cache, and the OpenAI error shape for each
bad request. See /work/shared/reference/openai-api.md for what each check is about.

    .venv/bin/python tests/api/openai_conformance_test.py --tachyon build/tachyon [--model M.gguf]
    .venv/bin/python tests/api/openai_conformance_test.py --url http://127.0.0.1:8080 --ctx 2048

With --url it runs against a server that is already up (any OpenAI-compatible one; the
lifecycle and --max-body-bytes checks are skipped), whose per-request context must be --ctx.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from urllib.parse import urlparse

import openai

try:
    import httpx
except ImportError:  # the openai client in .venv ships its HTTP library as httpx2
    import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_fixture import TachyonServer, metrics, parse_prometheus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"
CTX = 2048  # the server is started with -c CTX; the context checks depend on it

from checks import results, check, info, section, exit_status  # noqa: E402


CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to paint."}]


class Api:
    """What every section needs: the openai client, a raw HTTP client and the model id."""

    def __init__(self, url: str, ctx: int):
        self.url = url.rstrip("/")
        self.ctx = ctx
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0,
                                    timeout=300)
        self.http = httpx.Client(base_url=self.url, timeout=300)
        self.model = self.client.models.list().data[0].id

    def chat(self, messages, **kwargs):
        kwargs.setdefault("temperature", 0)
        return self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)

    def chat_stream(self, messages, **kwargs) -> list:
        kwargs.setdefault("temperature", 0)
        return list(self.client.chat.completions.create(model=self.model, messages=messages,
                                                        stream=True, **kwargs))


def stream_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def stream_finish(chunks) -> list:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def numbers_in(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text.replace(",", ""))]


# ---- sections ---------------------------------------------------------------------------------

def test_health_and_models(api: Api, expected_id: str | None) -> None:
    response = api.http.get("/health")
    check("GET /health is 200 {\"status\":\"ok\"}",
          response.status_code == 200 and response.json().get("status") == "ok",
          f"{response.status_code} {response.text[:200]}")
    response = api.http.get("/v1/models")
    body = response.json()
    check("GET /v1/models: object list, one model",
          response.status_code == 200 and body.get("object") == "list" and len(body.get("data", [])) >= 1,
          response.text[:300])
    entry = body["data"][0]
    check("/v1/models entry: id, object model, created int, owned_by",
          isinstance(entry.get("id"), str) and entry.get("object") == "model" and
          isinstance(entry.get("created"), int) and isinstance(entry.get("owned_by"), str), entry)
    if expected_id:
        check("model id is the model file's stem", api.model == expected_id,
              f"got {api.model!r}, expected {expected_id!r}")
    model = api.client.models.retrieve(api.model)
    check("GET /v1/models/{id}", model.id == api.model and model.object == "model", model)
    try:
        api.client.models.retrieve("no-such-model")
        check("GET /v1/models/no-such-model is 404", False, "no error")
    except openai.NotFoundError as error:
        check("GET /v1/models/no-such-model is 404", error.status_code == 404 and
              isinstance(error.body, dict) and error.body.get("message"), error.body)


def test_chat_basic(api: Api, state: dict) -> None:
    raw = api.client.chat.completions.with_raw_response.create(
        model=api.model, messages=CAPITAL, temperature=0, max_tokens=48)
    response = raw.parse()
    state["capital"] = response
    choice = response.choices[0]
    check("chat: content non-empty", choice.message.content and choice.message.content.strip(),
          repr(choice.message.content))
    check("chat: role assistant, index 0", choice.message.role == "assistant" and choice.index == 0,
          choice)
    check("chat: finish_reason stop or length", choice.finish_reason in ("stop", "length"),
          choice.finish_reason)
    check("chat: id starts with chatcmpl-", response.id.startswith("chatcmpl-"), response.id)
    check("chat: object chat.completion, model, created",
          response.object == "chat.completion" and response.model == api.model and
          isinstance(response.created, int) and response.created > 1_600_000_000, response)
    usage = response.usage
    check("chat: usage counts add up",
          usage and usage.prompt_tokens > 0 and usage.completion_tokens > 0 and
          usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage)
    check("chat: usage.prompt_tokens_details.cached_tokens is an int",
          usage and usage.prompt_tokens_details is not None and
          isinstance(usage.prompt_tokens_details.cached_tokens, int), usage)
    check("chat: usage.completion_tokens_details present",
          usage and usage.completion_tokens_details is not None, usage)
    check("chat: x-request-id header", raw.headers.get("x-request-id"), dict(raw.headers))
    body = json.loads(raw.http_response.text)
    message = body["choices"][0]["message"]
    check("chat: raw message has refusal: null", "refusal" in message and message["refusal"] is None,
          message)
    check("chat: raw choice has logprobs: null when not asked",
          body["choices"][0].get("logprobs", None) is None, body["choices"][0])
    again = api.chat(CAPITAL, max_tokens=48)
    check("chat: greedy output is deterministic",
          again.choices[0].message.content == choice.message.content,
          f"{again.choices[0].message.content!r} vs {choice.message.content!r}")
    other = api.http.post("/v1/chat/completions", json={"model": api.model, "messages": CAPITAL,
                                                         "max_tokens": 4})
    check("chat: x-request-id differs between requests",
          other.headers.get("x-request-id") and
          other.headers.get("x-request-id") != raw.headers.get("x-request-id"), dict(other.headers))


def test_chat_stream(api: Api, state: dict) -> None:
    reference = state.get("capital") or api.chat(CAPITAL, max_tokens=48)
    chunks = api.chat_stream(CAPITAL, max_tokens=48)
    check("stream: chunks arrived", len(chunks) >= 2, len(chunks))
    first = chunks[0]
    check("stream: first chunk carries role assistant",
          first.choices and first.choices[0].delta.role == "assistant", first)
    check("stream: same id (chatcmpl-) and created in every chunk",
          len({c.id for c in chunks}) == 1 and first.id.startswith("chatcmpl-") and
          len({c.created for c in chunks}) == 1, {(c.id, c.created) for c in chunks})
    check("stream: object chat.completion.chunk, model",
          all(c.object == "chat.completion.chunk" and c.model == api.model for c in chunks),
          {(c.object, c.model) for c in chunks})
    finishes = stream_finish(chunks)
    check("stream: exactly one finish chunk, the last",
          len(finishes) == 1 and chunks[-1].choices and chunks[-1].choices[0].finish_reason,
          [c.choices[0].finish_reason if c.choices else "-" for c in chunks][-5:])
    check("stream: finish_reason equals the non-streaming one",
          finishes and finishes[-1] == reference.choices[0].finish_reason,
          f"{finishes} vs {reference.choices[0].finish_reason}")
    text = stream_text(chunks)
    check("stream: content concatenation equals the non-streaming greedy content",
          text == reference.choices[0].message.content,
          f"{text!r} vs {reference.choices[0].message.content!r}")
    check("stream: no usage without stream_options", all(c.usage is None for c in chunks),
          [c.usage for c in chunks if c.usage])

    chunks = api.chat_stream(CAPITAL, max_tokens=48, stream_options={"include_usage": True})
    last = chunks[-1]
    check("include_usage: last chunk has choices == [] and usage",
          last.choices == [] and last.usage is not None, last)
    check("include_usage: usage null on every earlier chunk",
          all(c.usage is None for c in chunks[:-1]), [c.usage for c in chunks[:-1] if c.usage])
    if last.usage is not None:
        check("include_usage: usage equals the non-streaming usage",
              last.usage.prompt_tokens == reference.usage.prompt_tokens and
              last.usage.completion_tokens == reference.usage.completion_tokens and
              last.usage.total_tokens == reference.usage.total_tokens,
              f"{last.usage} vs {reference.usage}")
    check("include_usage: content unchanged", stream_text(chunks) == reference.choices[0].message.content,
          stream_text(chunks))


def test_token_caps(api: Api) -> None:
    for what, kwargs, cap in [("max_tokens=5", {"max_tokens": 5}, 5),
                              ("max_completion_tokens=7", {"max_completion_tokens": 7}, 7),
                              ("max_tokens=9 and max_completion_tokens=6 (the smaller wins)",
                               {"max_tokens": 9, "max_completion_tokens": 6}, 6)]:
        response = api.chat(STORY, **kwargs)
        check(f"{what}: finish_reason length, completion_tokens == {cap}",
              response.choices[0].finish_reason == "length" and response.usage.completion_tokens == cap,
              f"{response.choices[0].finish_reason}, {response.usage}")
    chunks = api.chat_stream(STORY, max_tokens=5, stream_options={"include_usage": True})
    check("stream max_tokens=5: finish length, usage.completion_tokens 5",
          stream_finish(chunks) == ["length"] and chunks[-1].usage and
          chunks[-1].usage.completion_tokens == 5, f"{stream_finish(chunks)} {chunks[-1].usage}")
    response = api.client.completions.create(model=api.model, prompt="Once upon a time",
                                             max_tokens=6, temperature=0,
                                             extra_body={"ignore_eos": True})
    check("completions max_tokens=6 + ignore_eos: length, 6 tokens",
          response.choices[0].finish_reason == "length" and response.usage.completion_tokens == 6,
          f"{response.choices[0].finish_reason} {response.usage}")


def test_stop(api: Api) -> None:
    base = api.chat(STORY, max_tokens=40).choices[0].message.content
    word = next((w for w in re.findall(r"[A-Za-z]{4,}", base) if base.index(w) >= 10), None)
    if not check("stop: the greedy story has a usable word", word, repr(base)):
        return
    expected = base[:base.index(word)]
    info(f"stop word {word!r}; expected output {expected!r}")
    for what, stop in [("stop=word", word), ("stop=[never, word]", ["@@never@@", word])]:
        response = api.chat(STORY, max_tokens=40, stop=stop)
        content = response.choices[0].message.content or ""
        check(f"{what}: finish_reason stop", response.choices[0].finish_reason == "stop",
              response.choices[0].finish_reason)
        check(f"{what}: the stop string is absent", word not in content, repr(content))
        check(f"{what}: output is the text before the stop string", content == expected,
              f"{content!r} vs {expected!r}")
    chunks = api.chat_stream(STORY, max_tokens=40, stop=[word])
    text = stream_text(chunks)
    check("stream stop: the stop string never reaches the client",
          word not in text and text == expected and stream_finish(chunks) == ["stop"],
          f"{text!r} {stream_finish(chunks)}")
    # A stop string that starts and ends inside tokens (so it spans several of them).
    middle = len(base) // 2
    stop = base[middle:middle + 7]
    expected = base[:base.index(stop)]
    info(f"mid-token stop string {stop!r}")
    response = api.chat(STORY, max_tokens=40, stop=stop)
    check("stop string spanning tokens: output is the text before it",
          response.choices[0].message.content == expected and response.choices[0].finish_reason == "stop",
          f"{response.choices[0].message.content!r} vs {expected!r}")
    chunks = api.chat_stream(STORY, max_tokens=40, stop=stop)
    check("stream stop string spanning tokens: output is the text before it",
          stream_text(chunks) == expected and stream_finish(chunks) == ["stop"],
          f"{stream_text(chunks)!r} vs {expected!r}")


def test_utf8(api: Api) -> None:
    prompt = "🚀🔥🚀🔥🚀🔥🚀🔥 Ünïcödé: ü ö ä ß é"
    whole = api.client.completions.create(model=api.model, prompt=prompt, max_tokens=24,
                                          temperature=0).choices[0].text
    chunks = list(api.client.completions.create(model=api.model, prompt=prompt, max_tokens=24,
                                                temperature=0, stream=True))
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    info(f"UTF-8 continuation: {whole!r}")
    check("UTF-8: streamed text equals the whole text", streamed == whole, f"{streamed!r} vs {whole!r}")
    check("UTF-8: no replacement characters", "\ufffd" not in whole and "\ufffd" not in streamed,
          repr(streamed))


def test_logprobs(api: Api) -> None:
    response = api.chat(STORY, max_tokens=12, logprobs=True, top_logprobs=3)
    choice = response.choices[0]
    entries = choice.logprobs.content if choice.logprobs else None
    if not check("logprobs: present", entries, choice):
        return
    check("logprobs: one entry per completion token", len(entries) == response.usage.completion_tokens,
          f"{len(entries)} vs {response.usage.completion_tokens}")
    check("logprobs: chosen logprob <= 0", all(e.logprob <= 0 for e in entries),
          [e.logprob for e in entries])
    check("logprobs: top_logprobs has 3 entries each",
          all(len(e.top_logprobs) == 3 for e in entries), [len(e.top_logprobs) for e in entries])
    check("logprobs: top_logprobs sorted by logprob, descending",
          all(all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:]))
              for e in entries), [[t.logprob for t in e.top_logprobs] for e in entries][:3])
    check("logprobs: greedy picks the top token",
          all(e.token == e.top_logprobs[0].token and abs(e.logprob - e.top_logprobs[0].logprob) < 1e-3
              for e in entries), [(e.token, e.top_logprobs[0].token) for e in entries])
    check("logprobs: tokens concatenate to the content",
          "".join(e.token for e in entries) == choice.message.content,
          f"{''.join(e.token for e in entries)!r} vs {choice.message.content!r}")
    check("logprobs: bytes are the token's UTF-8 bytes",
          all(e.bytes == list(e.token.encode()) for e in entries),
          [(e.token, e.bytes) for e in entries][:3])
    chunks = api.chat_stream(STORY, max_tokens=12, logprobs=True, top_logprobs=2)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                for e in (c.choices[0].logprobs.content or [])]
    check("stream logprobs: one entry per token, same tokens",
          [e.token for e in streamed] == [e.token for e in entries],
          f"{[e.token for e in streamed]} vs {[e.token for e in entries]}")


def test_sampling(api: Api) -> None:
    def sample(seed: int) -> str:
        return api.chat(STORY, temperature=1.0, seed=seed, max_tokens=24).choices[0].message.content

    first, second, other = sample(1234), sample(1234), sample(4321)
    check("seed: same seed, same text (temperature 1.0)", first == second, f"{first!r} vs {second!r}")
    info(f"seed: another seed gives {'other' if other != first else 'the same'} text")
    response = api.chat(STORY, temperature=0.8, top_p=0.9, max_tokens=8, seed=1,
                        extra_body={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
                                    "priority": "high"})
    check("extra_body top_k/min_p/repetition_penalty/priority accepted",
          response.choices[0].message.content, response)


def test_completions(api: Api) -> None:
    prompt = "The capital of France is"
    response = api.client.completions.create(model=api.model, prompt=prompt, max_tokens=16,
                                             temperature=0)
    choice = response.choices[0]
    check("completions: text non-empty", choice.text and choice.text.strip(), repr(choice.text))
    check("completions: id cmpl-, object text_completion, model",
          response.id.startswith("cmpl-") and response.object == "text_completion" and
          response.model == api.model, response)
    check("completions: finish_reason and usage",
          choice.finish_reason in ("stop", "length") and response.usage.prompt_tokens > 0 and
          response.usage.completion_tokens > 0 and
          response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens,
          f"{choice.finish_reason} {response.usage}")
    chunks = list(api.client.completions.create(model=api.model, prompt=prompt, max_tokens=16,
                                                temperature=0, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check("completions stream: same text as non-streaming", text == choice.text,
          f"{text!r} vs {choice.text!r}")
    check("completions stream: one id, object text_completion, finish chunk last",
          len({c.id for c in chunks}) == 1 and all(c.object == "text_completion" for c in chunks) and
          chunks[-1].choices and chunks[-1].choices[0].finish_reason == choice.finish_reason,
          chunks[-1])
    response = api.client.completions.create(model=api.model, prompt="Once upon a time",
                                             max_tokens=8, temperature=0, logprobs=2)
    lp = response.choices[0].logprobs
    if check("completions logprobs=2: present", lp is not None and lp.tokens, response.choices[0]):
        n = response.usage.completion_tokens
        check("completions logprobs: list lengths match completion_tokens",
              len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n,
              f"{len(lp.tokens)} {len(lp.token_logprobs)} {len(lp.top_logprobs or [])} "
              f"{len(lp.text_offset or [])} vs {n}")
        check("completions logprobs: values <= 0, top dicts of 1-2 entries",
              all(v <= 0 for v in lp.token_logprobs) and
              all(1 <= len(d) <= 2 and all(v <= 0 for v in d.values()) for d in lp.top_logprobs),
              lp)
        check("completions logprobs: tokens concatenate to the text",
              "".join(lp.tokens) == response.choices[0].text, f"{lp.tokens} vs {response.choices[0].text!r}")
        check("completions logprobs: text_offset increasing",
              all(a <= b for a, b in zip(lp.text_offset, lp.text_offset[1:])), lp.text_offset)
    tokens = api.http.post("/tokenize", json={"content": prompt}).json()["tokens"]
    response = api.client.completions.create(model=api.model, prompt=tokens, max_tokens=16,
                                             temperature=0)
    check("completions: a prompt of token ids works",
          response.choices[0].text and response.usage.prompt_tokens in (len(tokens), len(tokens) + 1),
          f"{response.usage} for {len(tokens)} ids")


def test_tokenize(api: Api) -> None:
    text = "Hello world, this is tachyon. Ünïcödé and emoji 🚀 too."
    response = api.http.post("/tokenize", json={"content": text})
    tokens = response.json().get("tokens") if response.status_code == 200 else None
    check("POST /tokenize gives a list of ints",
          isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens),
          f"{response.status_code} {response.text[:200]}")
    if tokens:
        response = api.http.post("/detokenize", json={"tokens": tokens})
        check("POST /detokenize round trip", response.status_code == 200 and
              response.json().get("content") == text, f"{response.status_code} {response.text[:200]}")
    response = api.http.post("/tokenize", json={"nope": 1})
    check("POST /tokenize without content is 400", response.status_code == 400, response.status_code)


def test_prefix_cache(api: Api) -> None:
    passage = SHAKESPEARE.read_text()[40000:42500]
    messages = [{"role": "user", "content": "Summarize this passage in one sentence:\n\n" + passage}]
    first = api.chat(messages, max_tokens=16)
    second = api.chat(messages, max_tokens=16)
    cached = second.usage.prompt_tokens_details.cached_tokens if second.usage.prompt_tokens_details else None
    info(f"prefix cache: prompt {second.usage.prompt_tokens} tokens, cached on the first request "
         f"{first.usage.prompt_tokens_details.cached_tokens}, on the second {cached}")
    check("prefix cache: the repeat has cached_tokens > 0", cached and cached > 0, second.usage)
    check("prefix cache: cached_tokens < prompt_tokens",
          cached is not None and cached < second.usage.prompt_tokens, second.usage)
    check("prefix cache: same greedy text from cache",
          first.choices[0].message.content == second.choices[0].message.content,
          f"{first.choices[0].message.content!r} vs {second.choices[0].message.content!r}")
    salted = api.chat(messages, max_tokens=16, extra_body={"cache_salt": "another-tenant"})
    check("prefix cache: another cache_salt reuses nothing",
          salted.usage.prompt_tokens_details.cached_tokens == 0, salted.usage)
    check("prefix cache: same greedy text with a salt",
          salted.choices[0].message.content == first.choices[0].message.content,
          salted.choices[0].message.content)


def test_batch_invariance(api: Api) -> None:
    prompts = [[{"role": "user", "content": q}] for q in
               ["What is the capital of France?", "Name three colors.",
                "Write a haiku about the sea.", "Explain gravity to a child in two sentences."]]
    alone = [api.chat(p, max_tokens=24).choices[0].message.content for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: api.chat(p, max_tokens=24).choices[0].message.content,
                                 prompts))
    check("greedy output is the same alone and in a concurrent batch", alone == together,
          f"{alone} vs {together}")


def expect_error(api: Api, what: str, call, status: int, param=..., code=..., error_type=...):
    """Runs call(); it must raise the openai error for `status` with these error fields
    (... = don't care). Returns the exception."""
    try:
        result = call()
        check(what, False, f"no error; got {str(result)[:300]}")
        return None
    except openai.APIStatusError as error:
        body = error.body if isinstance(error.body, dict) else {}
        problems = []
        if error.status_code != status:
            problems.append(f"status {error.status_code}, expected {status}")
        for key, expected in (("param", param), ("code", code), ("type", error_type)):
            if expected is not ... and body.get(key) != expected:
                problems.append(f"{key} {body.get(key)!r}, expected {expected!r}")
        raw = error.response.json() if error.response.content else None
        if not (isinstance(raw, dict) and isinstance(raw.get("error"), dict) and
                {"message", "type", "param", "code"} <= raw["error"].keys() and
                isinstance(raw["error"]["message"], str) and raw["error"]["message"]):
            problems.append(f"body is not the OpenAI error shape: {error.response.text[:300]}")
        if not error.response.headers.get("x-request-id"):
            problems.append("no x-request-id header")
        check(what, not problems, "; ".join(problems) + f" (body {body})")
        return error


def test_errors(api: Api) -> None:
    chat = api.client.chat.completions.create
    expect_error(api, "unknown model: 404 model_not_found",
                 lambda: chat(model="no-such-model", messages=CAPITAL, max_tokens=4), 404,
                 code="model_not_found")
    expect_error(api, "temperature 3.0: 400 param temperature",
                 lambda: api.chat(CAPITAL, temperature=3.0, max_tokens=4), 400, param="temperature",
                 error_type="invalid_request_error")
    expect_error(api, "top_p 1.5: 400 param top_p",
                 lambda: api.chat(CAPITAL, top_p=1.5, max_tokens=4), 400, param="top_p")
    expect_error(api, "messages empty: 400 param messages",
                 lambda: api.chat([], max_tokens=4), 400, param="messages")
    expect_error(api, "messages missing: 400 param messages",
                 lambda: api.client.post("/chat/completions", cast_to=object,
                                         body={"model": api.model, "max_tokens": 4}),
                 400, param="messages")
    expect_error(api, "max_tokens \"x\": 400 param max_tokens",
                 lambda: api.client.post("/chat/completions", cast_to=object,
                                         body={"model": api.model, "messages": CAPITAL, "max_tokens": "x"}),
                 400, param="max_tokens")
    expect_error(api, "max_tokens 0: 400 param max_tokens",
                 lambda: api.chat(CAPITAL, max_tokens=0), 400, param="max_tokens")
    expect_error(api, "top_logprobs 25: 400 param top_logprobs",
                 lambda: api.chat(CAPITAL, max_tokens=4, logprobs=True, top_logprobs=25), 400,
                 param="top_logprobs")
    expect_error(api, "a message with an unknown role: 400",
                 lambda: api.chat([{"role": "wizard", "content": "hi"}], max_tokens=4), 400)
    try:
        response = api.chat(CAPITAL, max_tokens=8, n=2)
        check("n=2: two choices with index 0 and 1",
              [c.index for c in response.choices] == [0, 1], response.choices)
    except openai.BadRequestError as error:
        check("n=2: 400 param n", error.status_code == 400 and error.body.get("param") == "n", error.body)

    # Tool calling: a required or named call is a call, never plain text (tool_calls_test.py
    # checks it in depth).
    weather = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        response = api.chat(CAPITAL, max_tokens=60, tools=weather, tool_choice=choice,
                            parallel_tool_calls=False)
        calls = response.choices[0].message.tool_calls or []
        check(f"tools with tool_choice {choice}: a call to get_weather",
              len(calls) >= 1 and calls[0].function.name == "get_weather" and
              response.choices[0].finish_reason == "tool_calls", response)
    response = api.chat(CAPITAL, max_tokens=4, tools=weather, tool_choice="none")
    check("tools with tool_choice none: a text answer",
          response.choices[0].message.content is not None and
          not response.choices[0].message.tool_calls, response)

    huge = [{"role": "user", "content": "hello " * (api.ctx + 1000)}]
    error = expect_error(api, "prompt over the context: 400 context_length_exceeded",
                         lambda: api.chat(huge, max_tokens=4), 400, code="context_length_exceeded",
                         error_type="invalid_request_error")
    if error is not None:
        message = error.body.get("message", "")
        numbers = numbers_in(message)
        check("context_length_exceeded message names the context and the prompt's size",
              api.ctx in numbers and any(n > api.ctx for n in numbers), message)
    error = expect_error(api, "max_tokens past the context: 400 context_length_exceeded",
                         lambda: api.chat(CAPITAL, max_tokens=api.ctx + 3000), 400,
                         code="context_length_exceeded")
    if error is not None:
        message = error.body.get("message", "")
        numbers = numbers_in(message)
        check("max_tokens context message names the context and the request's size",
              api.ctx in numbers and any(n > api.ctx for n in numbers), message)
    expect_error(api, "completions: prompt over the context",
                 lambda: api.client.completions.create(model=api.model, prompt="hello " * (api.ctx + 1000),
                                                       max_tokens=4), 400, code="context_length_exceeded")

    for what, request in [
            ("malformed JSON body: 400 JSON error", lambda: api.http.post(
                "/v1/chat/completions", content=b'{"model": "x", "messages": [',
                headers={"content-type": "application/json"})),
            ("JSON that is not an object: 400 JSON error", lambda: api.http.post(
                "/v1/chat/completions", content=b'[1, 2]', headers={"content-type": "application/json"})),
            ("unknown route GET /v1/nope: 404 JSON error", lambda: api.http.get("/v1/nope")),
            ("unknown route POST /v1/nope: 404 JSON error", lambda: api.http.post("/v1/nope", json={}))]:
        response = request()
        expected = 404 if "404" in what else 400
        try:
            body = response.json()
        except ValueError:
            body = None
        check(what, response.status_code == expected and isinstance(body, dict) and
              isinstance(body.get("error"), dict) and
              {"message", "type", "param", "code"} <= body["error"].keys() and
              response.headers.get("content-type", "").startswith("application/json") and
              response.headers.get("x-request-id"),
              f"{response.status_code} {response.headers.get('content-type')} {response.text[:300]}")
    response = api.http.get("/v1/chat/completions")
    try:
        body = response.json()
    except ValueError:
        body = None
    check("GET on a POST route: 404 or 405 with an error body",
          response.status_code in (404, 405) and isinstance(body, dict) and "error" in body,
          f"{response.status_code} {response.text[:200]}")


def test_raw_sse(api: Api) -> None:
    for path, body in [("/v1/chat/completions", {"model": api.model, "messages": CAPITAL, "max_tokens": 16,
                                                  "temperature": 0, "stream": True,
                                                  "stream_options": {"include_usage": True}}),
                       ("/v1/completions", {"model": api.model, "prompt": "Once upon a time",
                                            "max_tokens": 16, "temperature": 0, "stream": True})]:
        with api.http.stream("POST", path, json=body) as response:
            raw = b"".join(response.iter_raw())
            headers = response.headers
        name = f"raw SSE {path}"
        check(f"{name}: 200 text/event-stream", response.status_code == 200 and
              headers.get("content-type", "").startswith("text/event-stream"),
              f"{response.status_code} {dict(headers)}")
        check(f"{name}: x-request-id header", headers.get("x-request-id"), dict(headers))
        check(f"{name}: ends with data: [DONE]\\n\\n", raw.endswith(b"data: [DONE]\n\n"), raw[-80:])
        events = raw.split(b"\n\n")
        check(f"{name}: split into events, nothing after the last blank line", events[-1] == b"",
              events[-1][:80])
        events = [e for e in events[:-1] if not e.startswith(b":")]  # ": ping" comments are fine
        bad = [e for e in events if not e.startswith(b"data: ") or b"\n" in e]
        check(f"{name}: every event is one `data: ...` line", not bad, bad[:3])
        payloads = []
        for event in events[:-1]:
            try:
                payloads.append(json.loads(event[len(b"data: "):]))
            except ValueError:
                payloads.append(None)
        check(f"{name}: every data line but the last is JSON", all(p is not None for p in payloads),
              [e[:80] for e, p in zip(events, payloads) if p is None])
        check(f"{name}: [DONE] only at the end", events[-1] == b"data: [DONE]" and
              all(e != b"data: [DONE]" for e in events[:-1]), events[-3:])
        if path == "/v1/chat/completions" and payloads and all(payloads):
            check(f"{name}: usage chunk has \"choices\": [] (not null)",
                  payloads[-1].get("choices") == [] and payloads[-1].get("usage"), payloads[-1])
            check(f"{name}: earlier chunks carry \"usage\": null",
                  all("usage" in p and p["usage"] is None for p in payloads[:-1]),
                  [p.get("usage", "absent") for p in payloads[:-1]][:3])


def test_keepalive(api: Api) -> None:
    body = {"model": api.model, "messages": CAPITAL, "max_tokens": 8, "temperature": 0, "stream": True}
    check("after a finished stream, its keep-alive connection still works",
          *keepalive_after_stream(api.url, body))


def test_metrics(api: Api) -> None:
    response = api.http.get("/metrics")
    check("GET /metrics 200 text/plain", response.status_code == 200 and
          response.headers.get("content-type", "").startswith("text/plain"),
          f"{response.status_code} {response.headers.get('content-type')}")
    values = parse_prometheus(response.text)
    names = ["tachyon:num_requests_running", "tachyon:num_requests_waiting",
             "tachyon:kv_cache_blocks_used", "tachyon:kv_cache_blocks_total",
             "tachyon:prompt_tokens_total", "tachyon:generation_tokens_total",
             "tachyon:time_to_first_token_seconds_count"]
    missing = [n for n in names if n not in values]
    check("/metrics has the documented series", not missing, f"missing {missing}")
    check("/metrics counted the tokens of the requests so far",
          values.get("tachyon:prompt_tokens_total", 0) > 0 and
          values.get("tachyon:generation_tokens_total", 0) > 0, values)
    check("/metrics: nothing running or waiting when idle",
          values.get("tachyon:num_requests_running") == 0 and
          values.get("tachyon:num_requests_waiting") == 0, values)


def sse_events(response) -> "iter[str]":
    """The data payloads of an SSE response, as they arrive."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[len("data: "):]


def raw_post(url: str, path: str, body: dict) -> socket.socket:
    """Sends a POST on a raw socket and returns the socket unread (the caller closes it)."""
    address = urlparse(url)
    data = json.dumps(body).encode()
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def keepalive_after_stream(url: str, body: dict) -> tuple[bool, str]:
    """Streams `body` on a raw socket to the end of its chunked response, then sends GET /health
    on the same connection (as a client's connection pool would). (ok, detail)."""
    sock = raw_post(url, "/v1/chat/completions", body)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        piece = sock.recv(65536)
        if not piece:
            sock.close()
            return False, "the connection closed before the end of the chunked response"
        data += piece
    head = data.split(b"\r\n\r\n", 1)[0].decode(errors="replace").lower()
    if "connection: close" in head:
        sock.close()
        return True, ""  # announced: the client will not reuse it
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        answer = sock.recv(65536)
    except OSError as error:
        answer = f"{type(error).__name__}".encode()
    sock.close()
    return answer.startswith(b"HTTP/1.1 200"), (f"response headers say keep-alive, but GET /health on the "
                                                 f"same connection got {answer[:80]!r}")


def error_shaped(response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return (isinstance(body, dict) and isinstance(body.get("error"), dict) and
            {"message", "type", "param", "code"} <= body["error"].keys() and bool(body["error"]["message"]))


def test_limits_server(tachyon: str, model: str | None) -> None:
    """--max-body-bytes, --max-running 1 --max-waiting 1 (overload), and draining on SIGTERM."""
    server = TachyonServer(tachyon, model, check_exit=False,
                           args=["-c", str(CTX), "--max-body-bytes", "1024", "--max-running", "1",
                                 "--max-waiting", "1", "--shutdown-timeout", "30"])
    with server:
        http = httpx.Client(base_url=server.url, timeout=120)
        model_id = http.get("/v1/models").json()["data"][0]["id"]
        big = {"model": model_id, "max_tokens": 4,
               "messages": [{"role": "user", "content": "x" * 5000}]}
        response = http.post("/v1/chat/completions", json=big)
        check("body over --max-body-bytes: 413 with an OpenAI error body",
              response.status_code == 413 and error_shaped(response),
              f"{response.status_code} {response.text[:300]}")
        small = {"model": model_id, "max_tokens": 4, "messages": CAPITAL}
        response = http.post("/v1/chat/completions", json=small)
        check("a body under --max-body-bytes still works", response.status_code == 200,
              f"{response.status_code} {response.text[:200]}")

        long = {"model": model_id, "max_tokens": 1500, "ignore_eos": True, "stream": True, "messages": STORY}
        with httpx.Client(base_url=server.url, timeout=120) as other:
            with other.stream("POST", "/v1/chat/completions", json=long) as running:
                events = sse_events(running)
                next(events), next(events)   # A is generating now; B will wait behind it
                waiter = raw_post(server.url, "/v1/chat/completions", {**long, "max_tokens": 4})
                deadline = time.monotonic() + 10
                while metrics(server.url).get("tachyon:num_requests_waiting", 0) < 1 and \
                        time.monotonic() < deadline:
                    time.sleep(0.05)
                response = http.post("/v1/chat/completions", json=small)
                check("overload (--max-running 1 --max-waiting 1, both taken): 503 with an OpenAI error body",
                      response.status_code == 503 and error_shaped(response),
                      f"{response.status_code} {response.text[:300]}")
                check("overload: 503 carries retry-after", response.headers.get("retry-after"),
                      dict(response.headers))
                waiter.close()
        # (leaving the block hung up on A)

        drain = {"model": model_id, "max_tokens": 40, "ignore_eos": True, "stream": True, "messages": STORY}
        deadline = time.monotonic() + 10
        with httpx.Client(base_url=server.url, timeout=120) as other:
            while True:  # the hung-up request may still hold the one running slot for a moment
                with other.stream("POST", "/v1/chat/completions", json=drain) as response:
                    if response.status_code == 503 and time.monotonic() < deadline:
                        response.read()
                        time.sleep(0.2)
                        continue
                    events = sse_events(response)
                    payloads = [next(events), next(events)]
                    server.process.send_signal(signal.SIGTERM)
                    payloads += list(events)
                    break
        chunks = [json.loads(p) for p in payloads if p != "[DONE]"]
        finishes = [c["choices"][0]["finish_reason"] for c in chunks
                    if c.get("choices") and c["choices"][0].get("finish_reason")]
        check("SIGTERM during a stream: the stream finishes (length) and ends with [DONE]",
              payloads[-1] == "[DONE]" and finishes == ["length"], f"{finishes} {payloads[-2:]}")
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    check("limits server: exit 0 after draining", server.returncode == 0, f"exit {server.returncode}")


def test_timeout_server(tachyon: str, model: str | None) -> None:
    """--request-timeout 1: a long request fails, inside the stream when streaming."""
    server = TachyonServer(tachyon, model, check_exit=False,
                           args=["-c", str(CTX), "--request-timeout", "1"])
    with server:
        http = httpx.Client(base_url=server.url, timeout=120)
        model_id = http.get("/v1/models").json()["data"][0]["id"]
        body = {"model": model_id, "max_tokens": 1500, "ignore_eos": True, "messages": STORY}
        start = time.monotonic()
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
            payloads = list(sse_events(response))
        seconds = time.monotonic() - start
        last = json.loads(payloads[-1]) if payloads and payloads[-1] != "[DONE]" else {}
        check("stream past --request-timeout: ends with an error event, no [DONE]",
              "[DONE]" not in payloads and isinstance(last.get("error"), dict) and
              last["error"].get("message"), f"last events {payloads[-2:]}")
        check("stream past --request-timeout: stopped soon after the timeout", seconds < 10,
              f"{seconds:.1f} s")
        check("after a stream that ended with an error event, its keep-alive connection still works",
              *keepalive_after_stream(server.url, {**body, "stream": True}))
        http = httpx.Client(base_url=server.url, timeout=120)
        response = http.post("/v1/chat/completions", json=body)
        info(f"non-streaming request past --request-timeout: {response.status_code} {response.text[:160]}")
        check("non-streaming past --request-timeout: an error status with an OpenAI error body",
              response.status_code >= 400 and error_shaped(response),
              f"{response.status_code} {response.text[:300]}")
    check("timeout server: SIGTERM exits 0", server.returncode == 0, f"exit {server.returncode}")


def test_ping_server(tachyon: str, model: str | None) -> None:
    """--sse-ping-interval 0.1: while a long prompt is processed, the stream carries `: ping`
    comments before the first token."""
    server = TachyonServer(tachyon, model, check_exit=False,
                           args=["-c", str(CTX), "--sse-ping-interval", "0.1",
                                 "--max-batch-tokens", "64"])
    corpus = (ROOT.parent / "shared/data/corpus/tinyshakespeare.txt").read_text()
    with server:
        http = httpx.Client(base_url=server.url, timeout=120)
        model_id = http.get("/v1/models").json()["data"][0]["id"]
        body = {"model": model_id, "prompt": corpus[:5000], "max_tokens": 2, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as response:
            raw = b"".join(response.iter_raw())
        first_data = raw.find(b"data: ")
        check("long prompt: `: ping` comments before the first token",
              raw.find(b": ping\n\n") != -1 and raw.find(b": ping\n\n") < first_data,
              raw[:200])
        check("long prompt with pings: still ends with data: [DONE]",
              raw.endswith(b"data: [DONE]\n\n"), raw[-80:])
    check("ping server: SIGTERM exits 0", server.returncode == 0, f"exit {server.returncode}")


def run_all(url: str, ctx: int, expected_id: str | None) -> None:
    try:
        api = Api(url, ctx)
    except Exception as error:  # noqa: BLE001
        check(f"GET {url}/v1/models answers", False, f"{type(error).__name__}: {error}")
        return
    state: dict = {}
    section("health and models", test_health_and_models, api, expected_id)
    section("chat", test_chat_basic, api, state)
    section("chat stream", test_chat_stream, api, state)
    section("token caps", test_token_caps, api)
    section("stop", test_stop, api)
    section("logprobs", test_logprobs, api)
    section("sampling", test_sampling, api)
    section("completions", test_completions, api)
    section("UTF-8", test_utf8, api)
    section("tokenize", test_tokenize, api)
    section("prefix cache", test_prefix_cache, api)
    section("batch invariance", test_batch_invariance, api)
    section("errors", test_errors, api)
    section("raw SSE", test_raw_sse, api)
    section("keep-alive", test_keepalive, api)
    section("metrics", test_metrics, api)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", help="GGUF file (default: tachyon's default model)")
    parser.add_argument("--url", help="test this running server instead of starting tachyon")
    parser.add_argument("--ctx", type=int, default=CTX, help="with --url: the server's context size")
    args = parser.parse_args()
    expected_id = Path(args.model).stem if args.model else None
    if args.url:
        run_all(args.url, args.ctx, expected_id)
    else:
        if not expected_id:
            expected_id = "SmolLM2-135M-Instruct.Q4_1"
        server = TachyonServer(args.tachyon, args.model, args=["-c", str(CTX)], check_exit=False)
        try:
            with server:
                run_all(server.url, CTX, expected_id)
                if results["failed"]:
                    server.dump_stderr("some checks failed", last_lines=40)
        except Exception as error:  # noqa: BLE001
            check("server started", False, f"{type(error).__name__}: {error}")
        check("SIGTERM: tachyon serve exits 0", server.returncode == 0, f"exit {server.returncode}")
        section("limits server", test_limits_server, args.tachyon, args.model)
        section("ping server", test_ping_server, args.tachyon, args.model)
        section("timeout server", test_timeout_server, args.tachyon, args.model)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
