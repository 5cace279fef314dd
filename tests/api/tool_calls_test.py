#!/usr/bin/env python3
"""Tool calling through the HTTP API with the official openai client, on the default model
(whose chat template has no tool support: tachyon's generic format, the tools described in a
system message and calls written as <tool_call> blocks): tool_choice required and a named
function (the grammar makes a call certain), streamed and not, with arguments valid against the
tool's schema (jsonschema), OpenAI's streaming shape (the first delta of a call carries index,
id, type and name; later ones argument fragments that concatenate to the arguments), parallel
calls and parallel_tool_calls false, a multi-turn loop (call, tool result, answer), tool_choice
none, n=3 with a seed, and bad tools / tool_choice answered 400 with param.

    .venv/bin/python tests/api/tool_calls_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jsonschema
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, section  # noqa: E402
from server_fixture import TachyonServer, metrics  # noqa: E402

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 30},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 30}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather "
                                      "in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time in a "
                                      "timezone", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris and the time in Tokyo?"}]


def client_for(server: TachyonServer) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)
    return client, client.models.list().data[0].id


def valid_call(name: str, arguments: str, schemas: dict | None = None) -> str:
    """'' when the call names a tool and its arguments validate against its schema (`schemas`:
    name -> schema, default SCHEMAS), else why not."""
    schemas = SCHEMAS if schemas is None else schemas
    if name not in schemas:
        return f"unknown tool {name!r}"
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as error:
        return f"arguments are not JSON ({error}): {arguments!r}"
    errors = [e.message for e in jsonschema.Draft202012Validator(schemas[name]).iter_errors(value)]
    return "; ".join(errors)


def streamed(client, model, **kwargs):
    """(content, calls [{id, type, name, arguments}], finish_reason, shape problems)."""
    content, calls, finish, problems = "", {}, None, []
    for chunk in client.chat.completions.create(model=model, stream=True, **kwargs):
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                if call.index not in calls:
                    if not (call.id and call.type == "function" and call.function.name):
                        problems.append(f"first delta of call {call.index} lacks id/type/name")
                    calls[call.index] = {"id": call.id, "type": call.type,
                                         "name": call.function.name, "arguments": ""}
                elif call.id or call.function.name:
                    problems.append(f"a later delta of call {call.index} repeats id or name")
                calls[call.index]["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish, problems


def check_required_and_named(server: TachyonServer) -> None:
    client, model = client_for(server)
    answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice="required", parallel_tool_calls=False,
                                            temperature=0, max_tokens=120)
    choice = answer.choices[0]
    calls = choice.message.tool_calls or []
    check("required, parallel_tool_calls false: exactly one call", len(calls) == 1, calls)
    check("required: finish_reason tool_calls, content null",
          choice.finish_reason == "tool_calls" and choice.message.content is None,
          (choice.finish_reason, choice.message.content))
    for call in calls:
        check(f"required: {call.function.name} arguments validate",
              not valid_call(call.function.name, call.function.arguments),
              valid_call(call.function.name, call.function.arguments))
        check("required: call id and type", call.id.startswith("call_") and call.type ==
              "function", call)
    content, streamed_calls, finish, problems = streamed(
        client, model, messages=ASK, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_tokens=120)
    check("streamed: OpenAI's delta shape", not problems, problems)
    check("streamed == whole (name and arguments), finish tool_calls",
          [(c["name"], c["arguments"]) for c in streamed_calls] ==
          [(c.function.name, c.function.arguments) for c in calls] and finish == "tool_calls"
          and content == "", (streamed_calls, calls, finish, content))

    for name in ("get_time", "get_weather"):
        answer = client.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120,
            tool_choice={"type": "function", "function": {"name": name}})
        calls = answer.choices[0].message.tool_calls or []
        check(f"named {name}: one call to it, arguments valid",
              len(calls) == 1 and calls[0].function.name == name and
              not valid_call(name, calls[0].function.arguments), calls)


def check_parallel_and_loop(server: TachyonServer) -> None:
    client, model = client_for(server)
    answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice="required", temperature=0,
                                            max_tokens=200, frequency_penalty=0.5)
    calls = answer.choices[0].message.tool_calls or []
    check("parallel: two calls, both tools, arguments valid",
          sorted(c.function.name for c in calls) == ["get_time", "get_weather"] and
          all(not valid_call(c.function.name, c.function.arguments) for c in calls) and
          answer.choices[0].finish_reason == "tool_calls", calls)
    _, streamed_calls, finish, problems = streamed(
        client, model, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
        max_tokens=200, frequency_penalty=0.5)
    check("parallel streamed: indexes 0 and 1, same calls",
          not problems and [(c["name"], c["arguments"]) for c in streamed_calls] ==
          [(c.function.name, c.function.arguments) for c in calls], (streamed_calls, problems))

    # The loop: the calls go back with their results, and the model answers.
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": c.id, "type": "function",
         "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in calls]}]
    for call in calls:
        result = "18 degrees, light rain" if call.function.name == "get_weather" else "21:40"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    final = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                           temperature=0, max_tokens=60)
    check("multi-turn: the tool results are in the prompt",
          final.usage.prompt_tokens > answer.usage.prompt_tokens + 20,
          (final.usage.prompt_tokens, answer.usage.prompt_tokens))
    check("multi-turn: an answer comes back", final.choices[0].finish_reason in
          ("stop", "length", "tool_calls") and (final.choices[0].message.content or
                                                final.choices[0].message.tool_calls),
          final.choices[0])
    none = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                          tool_choice="none", temperature=0, max_tokens=30)
    check("tool_choice none: text, no calls", none.choices[0].message.tool_calls is None and
          bool(none.choices[0].message.content), none.choices[0].message)
    auto = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                          temperature=0, max_tokens=60)
    message = auto.choices[0].message
    check("auto: text or valid calls", bool(message.content) or all(
        not valid_call(c.function.name, c.function.arguments) for c in message.tool_calls or []),
        message)


def check_choices(server: TachyonServer) -> None:
    client, model = client_for(server)
    answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice="required", parallel_tool_calls=False,
                                            n=3, seed=5, temperature=1.0, max_tokens=120)
    ok = [len(c.message.tool_calls or []) == 1 and not valid_call(
        c.message.tool_calls[0].function.name, c.message.tool_calls[0].function.arguments)
        for c in answer.choices]
    check("n=3 with a seed: each choice one valid call", ok == [True] * 3,
          [c.message for c in answer.choices])
    again = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           n=3, seed=5, temperature=1.0, max_tokens=120)
    check("n=3 with a seed: reproducible",
          [(c.message.tool_calls[0].function.name, c.message.tool_calls[0].function.arguments)
           for c in again.choices if c.message.tool_calls] ==
          [(c.message.tool_calls[0].function.name, c.message.tool_calls[0].function.arguments)
           for c in answer.choices if c.message.tool_calls])


def check_response_format_with_tools(server: TachyonServer) -> None:
    """auto with a response_format: the answer is calls, or JSON valid against the schema."""
    client, model = client_for(server)
    reply = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40}},
             "required": ["answer"], "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "reply", "schema": reply}}
    for question in (ASK, [{"role": "user", "content": "Say hello in one word."}]):
        answer = client.chat.completions.create(model=model, messages=question, tools=TOOLS,
                                                response_format=response_format, temperature=0,
                                                parallel_tool_calls=False, max_tokens=120)
        message = answer.choices[0].message
        if message.tool_calls:
            check("tools + response_format: calls that validate",
                  all(not valid_call(c.function.name, c.function.arguments)
                      for c in message.tool_calls), message)
        else:
            try:
                value = json.loads(message.content)
                errors = [e.message for e in jsonschema.Draft202012Validator(reply).iter_errors(value)]
            except (TypeError, json.JSONDecodeError) as error:
                errors = [str(error)]
            check("tools + response_format: JSON valid against the schema", not errors,
                  (message.content, errors))
    required = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                              tool_choice="required", temperature=0,
                                              response_format=response_format, max_tokens=120)
    check("tools required + response_format: calls", bool(required.choices[0].message.tool_calls),
          required.choices[0].message)


def expect_400(client, model, param: str, what: str, **kwargs) -> None:
    try:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, **kwargs)
        check(f"{what}: 400", False, "answered 200")
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        check(f"{what}: 400 with param {param}", body.get("param") == param, body)


def check_bad_input(server: TachyonServer) -> None:
    client, model = client_for(server)
    expect_400(client, model, "tools[0].function.name", "a tool without a name",
               tools=[{"type": "function", "function": {"description": "x"}}])
    expect_400(client, model, "tool_choice", "tool_choice naming an unknown tool", tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": "get_stock"}})
    expect_400(client, model, "tools[0].function.parameters",
               "parameters with a keyword the grammar would skip",
               tools=[{"type": "function", "function": {"name": "f", "parameters": {
                   "type": "object", "not": {"required": ["a"]}}}}])
    expect_400(client, model, "tool_choice", "tool_choice required without tools",
               tool_choice="required")
    expect_400(client, model, "functions", "the legacy functions field",
               extra_body={"functions": [{"name": "f"}]})
    answer = client.chat.completions.create(model=model, messages=ASK, max_tokens=4)
    check("the server still answers after the refusals", len(answer.choices) == 1)
    calls = metrics(server.url).get("tachyon:tool_calls_total", 0)
    check("/metrics: tool calls counted", calls >= 10, calls)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    args = parser.parse_args()
    with TachyonServer(args.tachyon) as server:
        section("required and named", check_required_and_named, server)
        section("parallel calls and the loop", check_parallel_and_loop, server)
        section("n choices", check_choices, server)
        section("response_format with tools", check_response_format_with_tools, server)
        section("bad input", check_bad_input, server)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
