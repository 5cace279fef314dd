#!/usr/bin/env python3
"""Writes bench/speculative_prompts.json: the prompts of the speculative-decoding benchmark
(bench/speculative_bench.py). Two sets of chat messages:

- "grounded": 44 input-grounded tasks whose answer reuses the input (summarise, extract, rewrite,
  edit code, answer from a document), over passages of Shakespeare (public domain, from
  ../shared/data/corpus/tinyshakespeare.txt) and a few small programs written for this file;
- "open": 22 open-ended requests (stories, explanations, advice) with nothing to copy.

Deterministic: the same corpus gives the same file.

    python3 tools/make_speculative_prompts.py [--out bench/speculative_prompts.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"

PROGRAMS = [
    "def total_price(items):\n    total = 0\n    for item in items:\n        total += item.price * item.count\n    return total\n",
    "def find_user(users, name):\n    for user in users:\n        if user.name == name:\n            return user\n    return None\n",
    "int count_words(const char* text) {\n  int count = 0;\n  bool in_word = false;\n  for (; *text; ++text) {\n    if (*text == ' ') {\n      in_word = false;\n    } else if (!in_word) {\n      in_word = true;\n      ++count;\n    }\n  }\n  return count;\n}\n",
    "function average(values) {\n  let sum = 0;\n  for (const value of values) {\n    sum += value;\n  }\n  return sum / values.length;\n}\n",
    "def read_config(path):\n    config = {}\n    with open(path) as file:\n        for line in file:\n            key, value = line.split('=')\n            config[key.strip()] = value.strip()\n    return config\n",
    "SELECT name, email FROM users WHERE active = 1 AND created_at > '2020-01-01' ORDER BY name;\n",
]
CODE_EDITS = [
    "Rename the variable `total` to `sum_of_prices` and return the whole code.",
    "Add a docstring to the function and return the whole code.",
    "Rename `count` to `word_count` and return the whole function.",
    "Rename `sum` to `running_total` and return the whole function.",
    "Rename `config` to `settings` and return the whole code.",
    "Also select the `id` column and return the whole query.",
]
OPEN = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old.",
    "Give me five ideas for a rainy weekend.",
    "What are the benefits of learning a second language?",
    "Describe a perfect morning routine.",
    "Write a poem about the ocean at night.",
    "How do airplanes stay in the air?",
    "Tell me about the history of tea.",
    "What should I pack for a week-long hiking trip?",
    "Write a letter to a friend you have not seen in years.",
    "Explain how a computer stores numbers.",
    "Invent a new board game and describe its rules.",
    "Why do cats purr?",
    "Describe a city in the year 2200.",
    "Give advice to someone starting their first job.",
    "Write a dialogue between a robot and a gardener.",
    "What makes a good teacher?",
    "Explain the water cycle.",
    "Write a recipe for a simple vegetable soup.",
    "Tell a story about a dragon who is afraid of fire.",
    "How can I sleep better?",
    "Describe the feeling of the first snow of winter.",
]


def passages(text: str, count: int, lines: int) -> list[str]:
    out = []
    for i in range(count):
        start = text.index("\n\n", (i * 104723) % (len(text) - 6000)) + 2
        end = start
        for _ in range(lines):
            end = text.index("\n", end) + 1
        out.append(text[start:end].strip())
    return out


def grounded_prompts(text: str) -> list[dict]:
    prompts = []
    scenes = passages(text, 38, 8)
    tasks = [
        ("summarise", "Summarise this passage in two sentences, quoting its key line:\n\n{}"),
        ("extract", "List every line of this passage that ends with a comma, exactly as written:\n\n{}"),
        ("rewrite", "Rewrite this passage with modern punctuation, keeping every word:\n\n{}"),
        ("answer", "{}\n\nWho speaks first in the passage above, and what are their exact words?"),
        ("copy", "Copy the following passage exactly, line by line:\n\n{}"),
        ("answer", "Here is a document:\n\n{}\n\nQuote the last two lines of the document."),
        ("rewrite", "Put each sentence of this passage on its own line:\n\n{}"),
    ]
    for i, scene in enumerate(scenes):
        kind, template = tasks[i % len(tasks)]
        prompts.append({"kind": kind, "messages": [{"role": "user", "content": template.format(scene)}]})
    for program, edit in zip(PROGRAMS, CODE_EDITS):
        prompts.append({"kind": "edit_code",
                        "messages": [{"role": "user", "content": f"```\n{program}```\n\n{edit}"}]})
    return prompts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench/speculative_prompts.json"))
    args = parser.parse_args()
    text = CORPUS.read_text()
    data = {
        "source": "tools/make_speculative_prompts.py over ../shared/data/corpus/tinyshakespeare.txt",
        "grounded": grounded_prompts(text),
        "open": [{"kind": "open", "messages": [{"role": "user", "content": c}]} for c in OPEN],
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {len(data['grounded'])} grounded, {len(data['open'])} open-ended prompts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
