#!/usr/bin/env python3
"""Reference chat-template renderer: Python jinja2 set up the way Hugging Face transformers sets
it up (sandboxed immutable environment, trim_blocks, lstrip_blocks, loopcontrols, a json.dumps
`tojson`, `raise_exception`, `strftime_now`, a pass-through `{% generation %}` tag).

Command line mirrors `tachyon template`:
  render_chat_template_jinja2.py --template FILE.jinja --messages FILE.json
      [--add-generation-prompt] [--tools FILE.json] [--bos TEXT] [--eos TEXT] [--context JSON]
prints the rendered text with no added newline; on a template error prints it on stderr, exit 1.

Import `render()` to use it as a library (tests/chat/compare_chat_templates.py does).
"""

import argparse
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged, as transformers'
    AssistantTracker does when no assistant mask is requested."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers replaces jinja2's HTML-escaping tojson with plain json.dumps.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format_string):
    return datetime.now().strftime(format_string)


def make_environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render(source, messages, tools=None, add_generation_prompt=False, bos_token="",
           eos_token="", extra=None):
    """Renders like transformers' apply_chat_template(tokenize=False)."""
    template = make_environment().from_string(source)
    context = {
        "messages": messages,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    context.update(extra or {})
    return template.render(**context)


def load_conversation(path):
    """A messages file: a JSON array of messages, or {"messages": [...], "tools": ..., ...}."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, list):
        return data, None, {}
    messages = data["messages"]
    tools = data.get("tools")
    extra = {k: v for k, v in data.items() if k not in ("messages", "tools")}
    return messages, tools, extra


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", required=True)
    parser.add_argument("--messages", required=True)
    parser.add_argument("--add-generation-prompt", action="store_true")
    parser.add_argument("--tools")
    parser.add_argument("--bos", default="")
    parser.add_argument("--eos", default="")
    parser.add_argument("--context")
    args = parser.parse_args()

    with open(args.template, encoding="utf-8", newline="") as f:
        source = f.read()
    messages, tools, extra = load_conversation(args.messages)
    if args.tools:
        with open(args.tools, encoding="utf-8") as f:
            tools = json.load(f)
    if args.context:
        extra.update(json.loads(args.context))
    try:
        text = render(source, messages, tools, args.add_generation_prompt, args.bos, args.eos,
                      extra)
    except Exception as error:  # any jinja2 or Python error is a failed render
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
