#!/usr/bin/env python3
"""What a user does wrong, and the exact one-line message and non-zero exit they get.

Runs the real `tachyon` binary; builds the bad model files it needs with the PyPI `gguf` package.
    .venv/bin/python tests/cli/cli_errors_test.py --tachyon build/tachyon
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parents[2]


def write_tokenizer_gguf(path: Path, model: str, pre: str | None, tokens=None) -> None:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    tokens = tokens or ["a", "b", "ab"]
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    if model == "gpt2":
        writer.add_token_merges(["a b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    args = parser.parse_args()
    tachyon = args.tachyon

    work = Path(tempfile.mkdtemp(prefix="tachyon-cli-errors-"))
    try:
        empty_home = work / "home"
        empty_home.mkdir()
        empty_file = work / "empty.gguf"
        empty_file.write_bytes(b"")
        not_gguf = work / "notes.txt"
        not_gguf.write_text("hello, I am not a model\n")
        fixture = (ROOT / "tests/golden/gguf/fixture_v3.gguf").read_bytes()
        truncated = work / "truncated.gguf"
        truncated.write_bytes(fixture[:1200])
        no_tokenizer = ROOT / "tests/golden/gguf/fixture_v3.gguf"
        rwkv = work / "rwkv.gguf"
        write_tokenizer_gguf(rwkv, "rwkv", None)
        unknown_pre = work / "unknown-pre.gguf"
        write_tokenizer_gguf(unknown_pre, "gpt2", "no-such-pre")
        bad_json = work / "bad.jsonl"
        bad_json.write_text('"fine"\n{"not closed": \n')
        not_string = work / "number.jsonl"
        not_string.write_text('"fine"\n42\n')
        messages = work / "messages.json"
        messages.write_text('[{"role": "user", "content": "hi"}]')
        broken_messages = work / "broken.json"
        broken_messages.write_text('[{"role":\n')
        broken_template = work / "broken.jinja"
        broken_template.write_text("{% for x in %}\n")
        bad_ids = work / "ids.jsonl"
        bad_ids.write_text("[1, 2]\n[1, 99999999]\n")

        cases = [
            # (what the user did, argv, extra env, expected stderr line)
            ("model path that does not exist", ["info", "-m", "/no/such/model.gguf"], {},
             "tachyon: error: cannot open /no/such/model.gguf: No such file or directory"),
            ("no -m and no default model installed", ["info"], {"TACHYON_HOME": str(empty_home)},
             f"tachyon: error: no model given (-m MODEL) and the default model is not installed at "
             f"{empty_home}/models/SmolLM2-135M-Instruct.Q4_1.gguf; run `make setup` (or "
             f"scripts/fetch_model.sh) to fetch it"),
            ("a directory as the model", ["info", "-m", str(work)], {},
             f"tachyon: error: {work}: no config.json (not a Hugging Face model folder)"),
            ("an empty file", ["info", "-m", str(empty_file)], {},
             f"tachyon: error: {empty_file} is empty (0 bytes)"),
            ("a text file", ["info", "-m", str(not_gguf)], {},
             f"tachyon: error: {not_gguf}: not a GGUF file: magic is 0x6c6c6568, expected "
             f"0x46554747 (\"GGUF\")"),
            ("a truncated model", ["info", "-m", str(truncated)], {},
             f"tachyon: error: {truncated}: tensor 'f32_matrix': 60 bytes at data offset 0 run "
             f"past the end of the file (the data section holds 48 bytes of the file's 1200; "
             f"truncated?)"),
            ("a model without a tokenizer", ["tokenize", "-m", str(no_tokenizer), "-p", "hi"], {},
             f"tachyon: error: {no_tokenizer}: the model has no tokenizer: "
             f"'tokenizer.ggml.model' is missing"),
            ("an unknown tokenizer type", ["tokenize", "-m", str(rwkv), "-p", "hi"], {},
             f"tachyon: error: {rwkv}: tokenizer type 'rwkv' (tokenizer.ggml.model) is not "
             f"supported; supported: gpt2 (byte-level BPE), llama (SentencePiece)"),
            ("an unknown pre-tokenizer", ["tokenize", "-m", str(unknown_pre), "-p", "hi"], {},
             f"tachyon: error: {unknown_pre}: unknown pre-tokenizer 'no-such-pre' "
             f"(tokenizer.ggml.pre); known: deepseek-v3, default, gpt-2, gpt2, kimi-k2, "
             f"llama-bpe, llama3, qwen2, smollm"),
            ("tokenize without text", ["tokenize"], {},
             "tachyon: error: tokenize needs -p TEXT or --jsonl FILE"),
            ("a JSON Lines file that does not exist", ["tokenize", "--jsonl", "/no/such.jsonl"], {},
             "tachyon: error: cannot open /no/such.jsonl"),
            ("a JSON Lines file with a broken line", ["tokenize", "--jsonl", str(bad_json)], {},
             f"tachyon: error: {bad_json}:2: not valid JSON: incomplete JSON"),
            ("a JSON Lines line that is not a string", ["tokenize", "--jsonl", str(not_string)], {},
             f"tachyon: error: {not_string}:2: expected a JSON string, got 42"),
            ("a token id outside the vocabulary", ["detokenize", "--jsonl", str(bad_ids)], {},
             f"tachyon: error: {bad_ids}:2: token id 99999999 is outside the vocabulary "
             f"(0..49151)"),
            ("a messages file that does not exist",
             ["template", "--messages", str(work / "none.json")], {},
             f"tachyon: error: cannot open {work / 'none.json'}"),
            ("a messages file that is not JSON", ["template", "--messages", str(broken_messages)], {},
             f"tachyon: error: {broken_messages}: not valid JSON at line 2, column 1: incomplete JSON"),
            ("a model without a chat template",
             ["template", "-m", str(no_tokenizer), "--messages", str(messages)], {},
             f"tachyon: error: {no_tokenizer} has no chat template (tokenizer.chat_template); "
             f"pass --template FILE"),
            ("a template with a syntax error",
             ["template", "--messages", str(messages), "--template", str(broken_template)], {},
             f"tachyon: error: {broken_template}: chat template line 1: expected an expression, "
             f"got end of statement block"),
            ("detokenize without ids", ["detokenize"], {},
             "tachyon: error: detokenize needs --ids ID... or --jsonl FILE"),
        ]

        passed = failed = 0
        for what, argv, env_extra, expected in cases:
            env = dict(os.environ, **env_extra)
            result = subprocess.run([tachyon, *argv], capture_output=True, text=True, env=env,
                                    timeout=60)
            lines = result.stderr.splitlines()
            problems = []
            if result.returncode == 0:
                problems.append("exit code 0")
            if result.returncode < 0:
                problems.append(f"killed by signal {-result.returncode}")
            if lines != [expected]:
                problems.append(f"stderr was {result.stderr!r}\n      expected {expected!r}")
            if result.stdout:
                problems.append(f"stdout was {result.stdout[:200]!r}")
            if problems:
                failed += 1
                print(f"FAIL  {what}: " + "; ".join(problems))
            else:
                passed += 1
                print(f"ok    {what}")
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
