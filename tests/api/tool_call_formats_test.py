#!/usr/bin/env python3
"""Tool calling through `tachyon serve` for the formats whose markers are special tokens:
Kimi-K2 (its real chat template), DeepSeek-V3.1 (its real chat template) and Mistral's
[TOOL_CALLS]NAME[ARGS]{...} (a template written here in that format). Each runs on a tiny model
with random weights whose vocabulary holds the format's markers as control tokens, as the real
vocabularies do: the model's own choices are noise, so every call that comes back well formed
is the grammar's doing. With the official openai client: tool_choice required and a named
function, streamed and not (OpenAI's delta shape, streamed == whole), parallel_tool_calls false,
auto, and n=2 with a seed; arguments are validated with jsonschema and call ids are unique.

    .venv/bin/python tests/api/tool_call_formats_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tools"))
from checks import check, exit_status, section  # noqa: E402
from server_fixture import TachyonServer  # noqa: E402
from tool_calls_test import ASK, streamed, valid_call  # noqa: E402
import tiny_models  # noqa: E402

# Arguments the random model finishes quickly: every value bounded.
WEATHER = {"type": "object", "properties": {
    "city": {"enum": ["Paris", "Tokyo", "Lima"]},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12,
                                                  "maximum": 14}},
        "required": ["zone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MAX_TOKENS = 800

TEMPLATES = ROOT.parent / "shared/data/chat_templates"

# Mistral's v11+ layout ([TOOL_CALLS]name[ARGS]arguments per call), written for this test.
MISTRAL_ARGS_TEMPLATE = (
    "{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or m.role == 'system' %}[INST]{{ m.content }}[/INST]"
    "{%- elif m.role == 'assistant' %}{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}[TOOL_CALLS]{{ c.function.name }}[ARGS]"
    "{{ c.function.arguments }}{% endfor %}{{ eos_token }}"
    "{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
    "{%- endif %}{% endfor %}")

# format name as the server logs it -> (template, the markers as control tokens)
FORMATS = {
    "kimi_k2": ((TEMPLATES / "kimi-k2-instruct.llamacpp.jinja").read_text(),
                ("<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                 "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                 "<|tool_calls_section_end|>", "<|im_system|>", "<|im_middle|>", "<|im_end|>",
                 "<|im_user|>", "<|im_assistant|>")),
    "deepseek_v3.1": ((TEMPLATES / "deepseek-v3.1.llamacpp.jinja").read_text(),
                      ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                       "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜User｜>",
                       "<｜Assistant｜>")),
    "mistral_args": (MISTRAL_ARGS_TEMPLATE, ("[TOOL_CALLS]", "[ARGS]")),
}


def invalid_call(name: str, arguments: str) -> str:
    """'' when the call names one of these tools and its arguments validate, else why not."""
    return valid_call(name, arguments, SCHEMAS)


def write_model(directory: Path, name: str) -> Path:
    template, markers = FORMATS[name]
    base = tiny_models.get_config("llama_gqa")
    config = dataclasses.replace(base, name=f"tool_calls_{name}", context_length=4096,
                                 vocab_size=base.vocab_size + len(markers))
    path = directory / f"{config.name}.gguf"
    tiny_models.write_model(config.name, "f32", path, config=config, control_tokens=markers,
                            chat_template=template)
    return path


def check_format(server: TachyonServer, name: str) -> None:
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    check(f"{name}: the server detected the format", f"tool calls: {name} format" in server.stderr_text(),
          server.stderr_text()[-2000:])

    def valid_calls(calls, what: str, count: int | None = None) -> None:
        problems = [invalid_call(c.function.name, c.function.arguments) for c in calls]
        check(f"{name} {what}: {count or 'one or more'} call(s), arguments validate",
              (len(calls) == count if count else len(calls) >= 1) and not any(problems),
              (calls, problems))
        check(f"{name} {what}: call ids unique", len({c.id for c in calls}) == len(calls), calls)

    for seed in (1, 2):
        answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                                tool_choice="required", seed=seed,
                                                temperature=1.0, max_tokens=MAX_TOKENS)
        choice = answer.choices[0]
        valid_calls(choice.message.tool_calls or [], f"required (seed {seed})")
        check(f"{name} required: finish_reason tool_calls, no content",
              choice.finish_reason == "tool_calls" and not choice.message.content,
              (choice.finish_reason, choice.message.content))
        content, calls, finish, problems = streamed(
            client, model, messages=ASK, tools=TOOLS, tool_choice="required", seed=seed,
            temperature=1.0, max_tokens=MAX_TOKENS)
        check(f"{name} required streamed: OpenAI's delta shape, same calls as whole",
              not problems and finish == "tool_calls" and not content and
              [(c["name"], c["arguments"]) for c in calls] ==
              [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []],
              (problems, finish, content, calls, choice.message.tool_calls))

    answer = client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, temperature=0, max_tokens=MAX_TOKENS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = answer.choices[0].message.tool_calls or []
    valid_calls(calls, "named get_weather", 1)
    check(f"{name} named: the named function", [c.function.name for c in calls] == ["get_weather"],
          calls)
    answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice="required", parallel_tool_calls=False,
                                            seed=3, temperature=1.0, max_tokens=MAX_TOKENS)
    valid_calls(answer.choices[0].message.tool_calls or [], "parallel_tool_calls false", 1)

    answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, n=2, seed=4,
                                            tool_choice="required", temperature=1.0,
                                            max_tokens=MAX_TOKENS)
    for choice in answer.choices:
        valid_calls(choice.message.tool_calls or [], f"n=2 choice {choice.index}")
    again = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, n=2, seed=4,
                                           tool_choice="required", temperature=1.0,
                                           max_tokens=MAX_TOKENS)
    check(f"{name} n=2 with a seed: reproducible",
          [[(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
           for ch in answer.choices] ==
          [[(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
           for ch in again.choices])

    # auto: the random model writes text; whatever calls it starts are well formed.
    for seed in (5, 6, 7):
        answer = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, seed=seed,
                                                temperature=1.0, max_tokens=60)
        choice = answer.choices[0]
        calls = choice.message.tool_calls or []
        # (a call cut short by max_tokens ends the answer with finish_reason length)
        complete = calls[:-1] if choice.finish_reason == "length" else calls
        check(f"{name} auto (seed {seed}): text, or calls that validate",
              all(not invalid_call(c.function.name, c.function.arguments) for c in complete) and
              choice.finish_reason in (("tool_calls", "length") if calls else ("stop", "length")),
              choice)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--format", choices=sorted(FORMATS), action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tachyon-tool-formats-") as directory:
        for name in args.format or sorted(FORMATS):
            path = write_model(Path(directory), name)
            with TachyonServer(args.tachyon, model=str(path)) as server:
                section(f"{name} format", check_format, server, name)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
