#!/usr/bin/env python3
"""Structured output through the HTTP API with the official openai client: response_format
json_schema over a suite of 100+ schemas (schema_suite.py), every answer checked with the
`jsonschema` package (formats included); json_object; tachyon's regex and grammar; streamed
answers identical to whole ones; seeded sampling reproducible under a schema; an answer cut by
max_tokens ends with finish_reason "length" (and is no valid JSON), never "stop"; schemas whose
keywords the grammar would skip, malformed schemas, bad regexes and grammars, and a schema over
the compile time limit each get a 400 naming response_format, and the server keeps serving.

    .venv/bin/python tests/api/structured_output_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import sys
import time
from pathlib import Path

import jsonschema
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from schema_suite import MALFORMED, UNSUPPORTED, suite  # noqa: E402
from server_fixture import TachyonServer, metrics  # noqa: E402

MAX_TOKENS = 320


def client_for(server: TachyonServer) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)
    return client, client.models.list().data[0].id


def schema_format(name: str, schema: dict) -> dict:
    return {"type": "json_schema",
            "json_schema": {"name": re.sub(r"[^A-Za-z0-9_-]", "_", name), "schema": schema,
                            "strict": True}}


def ask(client, model, prompt, response_format, **extra):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}],
        response_format=response_format, max_tokens=extra.pop("max_tokens", MAX_TOKENS),
        **{"temperature": 0, **extra})


def validates(schema: dict, text: str) -> str:
    """'' when `text` is JSON that `schema` accepts (formats checked too), else why not."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return f"not JSON ({error}): {text[:200]!r}"
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = [error.message for error in validator.iter_errors(value)]
    return "; ".join(errors)[:300]


def check_schema_suite(server: TachyonServer) -> None:
    client, model = client_for(server)
    entries = suite()
    check("the suite has at least 100 schemas", len(entries) >= 100, len(entries))

    # Greedy, with OpenAI's frequency penalty over the generated tokens: a 135M model at
    # temperature 0 otherwise nests a recursive schema or repeats digits until max_tokens (the
    # grammar allows both); penalised repeats make it close its brackets.
    def run(entry):
        name, schema, prompt = entry
        answer = ask(client, model, prompt, schema_format(name, schema), frequency_penalty=1.5)
        return entry, answer.choices[0]

    failures = []
    lengths = 0
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for (name, schema, _), choice in pool.map(run, entries):
            text = choice.message.content
            if choice.finish_reason != "stop":
                lengths += 1
                failures.append(f"{name}: finish_reason {choice.finish_reason}: {text[:120]!r}")
                continue
            why = validates(schema, text)
            if why:
                failures.append(f"{name}: {why}")
    info(f"{len(entries)} schemas, {lengths} cut by max_tokens")
    check("every answer in the schema suite parses and validates with jsonschema", not failures,
          "\n  " + "\n  ".join(failures))


def check_other_formats(server: TachyonServer) -> None:
    client, model = client_for(server)
    answer = ask(client, model, "Describe a book as JSON.", {"type": "json_object"},
                 frequency_penalty=1.5)
    text = answer.choices[0].message.content
    check("json_object: a JSON object", answer.choices[0].finish_reason == "stop" and
          isinstance(json.loads(text), dict), text)

    pattern = r"\(\d{3}\) \d{3}-\d{4}"
    answer = ask(client, model, "A phone number?", None,
                 extra_body={"response_format": {"type": "regex", "regex": pattern}})
    text = answer.choices[0].message.content
    check("regex: the whole answer matches", re.fullmatch(pattern, text) is not None, text)

    grammar = 'root ::= answer "."\nanswer ::= "yes" | "no" | "maybe"'
    answer = ask(client, model, "Will it rain?", None, temperature=1.0, seed=11,
                 extra_body={"response_format": {"type": "grammar", "grammar": grammar}})
    text = answer.choices[0].message.content
    check("grammar: the answer is in the language", text in ("yes.", "no.", "maybe."), text)

    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
              "minItems": 3, "maxItems": 6}
    first = [ask(client, model, "Digits.", schema_format("digits", schema), temperature=1.2,
                 seed=5).choices[0].message.content for _ in range(2)]
    check("seeded sampling under a schema is reproducible", first[0] == first[1], first)
    check("seeded sampling under a schema validates", not validates(schema, first[0]), first[0])

    # Streamed deltas concatenate to the whole answer, for greedy and seeded answers.
    for name, schema, prompt in suite()[:6]:
        for extra in ({}, {"temperature": 0.9, "seed": 3}):
            whole = ask(client, model, prompt, schema_format(name, schema), **extra)
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}],
                response_format=schema_format(name, schema), max_tokens=MAX_TOKENS, stream=True,
                **{"temperature": 0, **extra})
            pieces, finish = [], None
            for chunk in stream:
                if chunk.choices:
                    pieces.append(chunk.choices[0].delta.content or "")
                    finish = chunk.choices[0].finish_reason or finish
            check(f"{name} {extra}: streamed == whole",
                  "".join(pieces) == whole.choices[0].message.content and
                  finish == whole.choices[0].finish_reason,
                  ("".join(pieces), whole.choices[0].message.content))

    # Cut short: "length", and the text is no valid answer.
    schema = {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 6}
    answer = ask(client, model, "Six city names.", schema_format("cities", schema), max_tokens=6)
    choice = answer.choices[0]
    check("JSON cut by max_tokens ends with finish_reason length",
          choice.finish_reason == "length", choice.finish_reason)
    check("JSON cut by max_tokens is not valid", bool(validates(schema, choice.message.content)),
          choice.message.content)

    # The completions endpoint takes it too (as vLLM's does).
    completion = client.completions.create(
        model=model, prompt="The answer is", max_tokens=20, temperature=0,
        extra_body={"response_format": {"type": "regex", "regex": " (yes|no)"}})
    check("completions: regex", completion.choices[0].text in (" yes", " no"),
          completion.choices[0].text)


def expect_400(client, model, response_format, what: str, needle: str = "") -> None:
    try:
        ask(client, model, "Hi", None, extra_body={"response_format": response_format},
            max_tokens=8)
        check(f"{what}: 400", False, "answered 200")
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        check(f"{what}: 400 naming response_format{' and ' + needle if needle else ''}",
              body.get("param") == "response_format" and needle in body.get("message", ""),
              body)


def check_refusals(server: TachyonServer) -> None:
    client, model = client_for(server)
    for keyword, schema in UNSUPPORTED:
        expect_400(client, model, schema_format("x", schema), f"unsupported {keyword}", keyword)
    for what, schema in MALFORMED:
        expect_400(client, model, schema_format("x", schema), f"malformed schema: {what}")
    expect_400(client, model, {"type": "regex", "regex": "(unclosed"}, "a regex that does not parse")
    expect_400(client, model, {"type": "regex", "regex": "(?=lookahead)a"}, "a regex with lookahead")
    expect_400(client, model, {"type": "grammar", "grammar": "root ::= missing"},
               "a grammar naming an undefined rule")
    expect_400(client, model, {"type": "grammar", "grammar": "root ::= \"a"},
               "a grammar that does not parse")
    # Every refusal left the server serving.
    answer = ask(client, model, "A color.", schema_format("c", suite()[4][1]))
    check("the server still answers after the refusals", answer.choices[0].finish_reason == "stop")
    counters = metrics(server.url)
    refused = len(UNSUPPORTED) + len(MALFORMED) + 4
    check("/metrics: every refused grammar counted",
          counters.get("tachyon:grammars_refused_total", 0) >= refused, counters.get(
              "tachyon:grammars_refused_total"))
    check("/metrics: grammar waits observed",
          counters.get("tachyon:grammar_wait_seconds_count", 0) >= len(suite()),
          counters.get("tachyon:grammar_wait_seconds_count"))


def check_compile_limit(server: TachyonServer) -> None:
    client, model = client_for(server)
    # Many distinct properties with formats and patterns: far more than 1 ms of compilation.
    schema = {"type": "object", "additionalProperties": False,
              "properties": {f"field_{i}": {"type": "string", "format": "date-time"}
                             for i in range(40)}}
    expect_400(client, model, schema_format("big", schema), "a schema over the compile limit",
               "took longer than")
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    check("the server still answers after a compile timeout", len(answer.choices) == 1)
    # The abandoned compilation finished in the background and filled the cache: the same
    # schema is now served within the limit.
    for _ in range(50):
        try:
            answer = ask(client, model, "Dates.", schema_format("big", schema), max_tokens=8)
            break
        except openai.BadRequestError:
            time.sleep(0.2)
    else:
        answer = None
    check("the timed-out schema is served from the cache once compiled", answer is not None and
          answer.choices[0].finish_reason == "length")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    args = parser.parse_args()
    with TachyonServer(args.tachyon) as server:
        section("schema suite", check_schema_suite, server)
        section("other formats", check_other_formats, server)
        section("refusals", check_refusals, server)
    with TachyonServer(args.tachyon, args=["--grammar-compile-timeout", "0.001"]) as server:
        section("compile limit", check_compile_limit, server)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
