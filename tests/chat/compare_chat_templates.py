#!/usr/bin/env python3
"""Renders real chat templates with `tachyon template` and with Python jinja2 (set up as Hugging
Face transformers does, tools/render_chat_template_jinja2.py) and compares the bytes.

Templates: every *.jinja in <shared>/data/chat_templates plus the default model's own
tokenizer.chat_template (skipped, with a note, when the model file is missing). Conversations:
tests/chat/conversations/*.json, each with add_generation_prompt false and true.
When jinja2 raises (e.g. a role-alternation check), tachyon must fail too: that counts as
agreement. Exits non-zero on any mismatch, printing a short diff.

  .venv/bin/python tests/chat/compare_chat_templates.py --tachyon build/tachyon
"""

import argparse
import concurrent.futures
import difflib
import glob
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
from render_chat_template_jinja2 import load_conversation, render  # noqa: E402

CONVERSATIONS = os.path.join(REPO, "tests", "chat", "conversations")
BOS = "<|bos|>"
EOS = "<|eos|>"


def default_model_path():
    home = os.environ.get("TACHYON_HOME") or os.path.expanduser("~/.cache/tachyon")
    return os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def read_model(path):
    """(chat template, bos text, eos text) from a GGUF, via the gguf package."""
    import gguf

    reader = gguf.GGUFReader(path)

    def field_string(field):
        return bytes(field.parts[field.data[0]]).decode("utf-8")

    def field_int(name):
        field = reader.fields.get(name)
        return int(field.parts[field.data[0]][0]) if field is not None else None

    fields = reader.fields
    source = field_string(fields["tokenizer.chat_template"])
    tokens = fields["tokenizer.ggml.tokens"]

    def token_text(token_id):
        if token_id is None or token_id >= len(tokens.data):
            return ""
        return bytes(tokens.parts[tokens.data[token_id]]).decode("utf-8")

    return (source, token_text(field_int("tokenizer.ggml.bos_token_id")),
            token_text(field_int("tokenizer.ggml.eos_token_id")))


def run_tachyon(command):
    result = subprocess.run(command, capture_output=True, timeout=60)
    return result.returncode, result.stdout, result.stderr.decode("utf-8", "replace").strip()


def short_diff(expected, actual):
    lines = difflib.unified_diff(expected.splitlines(keepends=True),
                                 actual.splitlines(keepends=True),
                                 "jinja2", "tachyon", n=1)
    out = [repr(line) for line in lines]
    return "\n".join(out[:24]) + ("\n    ..." if len(out) > 24 else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tachyon", required=True, help="path of the tachyon binary")
    parser.add_argument("--shared-dir", default=os.path.join(REPO, "..", "shared"))
    parser.add_argument("--model", default=default_model_path())
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()

    # (label, source, bos, eos, tachyon arguments selecting the template)
    templates = []
    for path in sorted(glob.glob(os.path.join(args.shared_dir, "data", "chat_templates", "*.jinja"))):
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        templates.append((os.path.basename(path), source, BOS, EOS,
                          ["--template", path, "--bos", BOS, "--eos", EOS]))
    if not templates:
        print(f"no templates found under {args.shared_dir}/data/chat_templates", file=sys.stderr)
        return 1
    if os.path.exists(args.model):
        source, bos, eos = read_model(args.model)
        templates.append((os.path.basename(args.model) + " (embedded)", source, bos, eos,
                          ["-m", args.model]))
    else:
        print(f"note: default model {args.model} not found; skipping its embedded template")

    conversations = sorted(glob.glob(os.path.join(CONVERSATIONS, "*.json")))
    jobs = []
    for label, source, bos, eos, template_args in templates:
        for conversation in conversations:
            messages, tools, extra = load_conversation(conversation)
            for add_generation_prompt in (False, True):
                try:
                    expected = render(source, messages, tools, add_generation_prompt, bos, eos,
                                      extra)
                except Exception as error:  # jinja2 refused: tachyon must fail too
                    expected = error
                command = [args.tachyon, "template", *template_args, "--messages", conversation]
                if add_generation_prompt:
                    command.append("--add-generation-prompt")
                name = f"{os.path.basename(conversation)} agp={add_generation_prompt}"
                jobs.append((label, name, expected, command))

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda job: run_tachyon(job[3]), jobs))

    total = identical = 0
    per_template = {}
    failures = []
    for (label, name, expected, command), (code, stdout, stderr) in zip(jobs, results):
        total += 1
        stats = per_template.setdefault(label, [0, 0, 0])
        stats[0] += 1
        if isinstance(expected, Exception):
            ok = code != 0
            if ok:
                stats[2] += 1
            else:
                failures.append(f"{label} / {name}: jinja2 raised "
                                f"{type(expected).__name__}: {expected}, tachyon rendered "
                                f"{stdout[:200]!r}")
        else:
            actual = stdout.decode("utf-8", "replace")
            ok = code == 0 and actual == expected
            if not ok:
                if code != 0:
                    failures.append(f"{label} / {name}: tachyon failed: {stderr}")
                else:
                    failures.append(f"{label} / {name}: output differs\n"
                                    + short_diff(expected, actual))
        if ok:
            identical += 1
            stats[1] += 1

    for label, (count, same, both_failed) in per_template.items():
        status = "ok" if count == same else "MISMATCH"
        print(f"  {label}: {same}/{count} identical ({both_failed} failing in both) {status}")
    for failure in failures:
        print("FAIL " + failure)
    print(f"chat templates: {total} renders compared, {identical} identical")
    return 0 if identical == total else 1


if __name__ == "__main__":
    sys.exit(main())
