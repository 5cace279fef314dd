#!/usr/bin/env python3
"""n > 1 through the HTTP API with the official openai client: n choices with index 0..n-1,
seeded choice i equal to a single request with seed + i (so reproducible), usage counting the
prompt once and every completion, the prompt computed once (the other choices hit the prefix
cache, seen in /metrics), streamed deltas per index equal to the whole answer, completions
logprobs offsets per choice, every choice valid under a JSON schema, and n out of range a 400.

    .venv/bin/python tests/api/choices_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, section  # noqa: E402
from server_fixture import TachyonServer, metrics  # noqa: E402

PROMPT = [{"role": "user", "content": "Write one sentence about a lighthouse keeper and the "
                                      "storm that came in the night, for a children's book."}]


def client_for(server: TachyonServer) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)
    return client, client.models.list().data[0].id


def check_seeded_choices(server: TachyonServer) -> None:
    client, model = client_for(server)
    before = metrics(server.url)
    many = client.chat.completions.create(model=model, messages=PROMPT, n=3, seed=7,
                                          temperature=1.0, max_tokens=24)
    after = metrics(server.url)
    check("n=3: three choices, index 0..2", [c.index for c in many.choices] == [0, 1, 2],
          [c.index for c in many.choices])
    texts = [c.message.content for c in many.choices]
    check("n=3: the samples differ", len(set(texts)) > 1, texts)
    singles = [client.chat.completions.create(model=model, messages=PROMPT, seed=7 + i,
                                              temperature=1.0, max_tokens=24) for i in range(3)]
    check("seeded choice i == one request with seed + i",
          texts == [s.choices[0].message.content for s in singles],
          (texts, [s.choices[0].message.content for s in singles]))
    check("finish reasons per choice", [c.finish_reason for c in many.choices] ==
          [s.choices[0].finish_reason for s in singles])
    again = client.chat.completions.create(model=model, messages=PROMPT, n=3, seed=7,
                                           temperature=1.0, max_tokens=24)
    check("n=3 with a seed is reproducible", [c.message.content for c in again.choices] == texts)
    check("usage: the prompt once", many.usage.prompt_tokens == singles[0].usage.prompt_tokens,
          (many.usage, singles[0].usage))
    check("usage: every completion counted",
          many.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles),
          (many.usage.completion_tokens, [s.usage.completion_tokens for s in singles]))
    hits = after["tachyon:prefix_cache_hits_total"] - before["tachyon:prefix_cache_hits_total"]
    prompt = many.usage.prompt_tokens
    check("the prompt is computed once: choices 1 and 2 hit the prefix cache for its full blocks",
          hits >= 2 * (prompt // 16) * 16 and hits > 0, (hits, prompt))


def check_streamed_choices(server: TachyonServer) -> None:
    client, model = client_for(server)
    whole = client.chat.completions.create(model=model, messages=PROMPT, n=3, seed=21,
                                           temperature=0.9, max_tokens=20)
    stream = client.chat.completions.create(model=model, messages=PROMPT, n=3, seed=21,
                                            temperature=0.9, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True})
    texts, finishes, roles, usage = {}, {}, {}, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.delta.role:
                roles[choice.index] = choice.delta.role
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    check("streamed n=3: a role delta per index", roles == {0: "assistant", 1: "assistant",
                                                           2: "assistant"}, roles)
    check("streamed n=3: deltas per index == the whole answer's choices",
          [texts.get(i) for i in range(3)] == [c.message.content for c in whole.choices],
          (texts, [c.message.content for c in whole.choices]))
    check("streamed n=3: a finish reason per index",
          [finishes.get(i) for i in range(3)] == [c.finish_reason for c in whole.choices],
          finishes)
    check("streamed n=3: one usage with the totals",
          usage is not None and usage.completion_tokens == whole.usage.completion_tokens and
          usage.prompt_tokens == whole.usage.prompt_tokens, (usage, whole.usage))


def check_completions_and_schema(server: TachyonServer) -> None:
    client, model = client_for(server)
    completion = client.completions.create(model=model, prompt="Once upon a time", n=2, seed=3,
                                           temperature=1.0, max_tokens=6, logprobs=1)
    check("completions n=2: two choices", [c.index for c in completion.choices] == [0, 1])
    check("completions n=2: logprobs text_offset starts at 0 in each choice",
          all(c.logprobs.text_offset[0] == 0 for c in completion.choices),
          [c.logprobs.text_offset for c in completion.choices])
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                               "age": {"type": "integer", "minimum": 0}},
              "required": ["name", "age"], "additionalProperties": False}
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "A person."}], n=3, seed=9,
        temperature=1.0, max_tokens=60, frequency_penalty=1.5,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    values = []
    for choice in answer.choices:
        try:
            value = json.loads(choice.message.content)
            values.append(set(value) == {"name", "age"} and isinstance(value["age"], int))
        except json.JSONDecodeError:
            values.append(False)
    check("n=3 with a JSON schema: every choice is valid", all(values) and len(values) == 3,
          [c.message.content for c in answer.choices])
    for n in (0, 129):
        try:
            client.chat.completions.create(model=model, messages=PROMPT, n=n, max_tokens=2)
            check(f"n={n}: 400", False, "answered")
        except openai.BadRequestError as error:
            check(f"n={n}: 400 naming n", error.body.get("param") == "n", error.body)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    args = parser.parse_args()
    with TachyonServer(args.tachyon) as server:
        section("seeded choices", check_seeded_choices, server)
        section("streamed choices", check_streamed_choices, server)
        section("completions and schema", check_completions_and_schema, server)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
