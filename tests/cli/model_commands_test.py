#!/usr/bin/env python3
"""The model-running commands (generate, chat, perplexity, bench) end to end: what they print,
that they are deterministic where they should be, and the exact one-line error for each bad
input. Uses the default model and tiny models written here with tools/tiny_models.py.
    .venv/bin/python tests/cli/model_commands_test.py --tachyon build/tachyon
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests/api"))
import tiny_models  # noqa: E402
from checks import check, exit_status  # noqa: E402


def run(tachyon: str, *argv: str, stdin: str | None = None, timeout: int = 300):
    return subprocess.run([tachyon, *argv], capture_output=True, text=True, input=stdin,
                          timeout=timeout)


def expect_error(tachyon: str, what: str, argv: list[str], expected: str) -> None:
    result = run(tachyon, *argv)
    lines = result.stderr.splitlines()
    check(what, result.returncode == 1 and lines == [expected] and result.stdout == "",
          f"exit {result.returncode}, stderr {result.stderr!r}, expected {expected!r}")


def write_variant(path: Path, arch: str | None = None, tensor_type_for: str | None = None,
                  drop: str | None = None) -> Path:
    """A tiny llama model with one thing wrong: another architecture name, one matrix stored in
    a type tachyon cannot compute with (IQ4_NL), or a missing tensor."""
    config = tiny_models.get_config("llama_gqa")
    base = tiny_models.write_model("llama_gqa", "f32", path.with_suffix(".base.gguf"))
    reader = gguf.GGUFReader(str(base))
    writer = gguf.GGUFWriter(str(path), arch=arch or config.arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if arch and name.startswith(config.arch + "."):
            name = arch + name[len(config.arch):]
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, field.contents())
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(name, field.contents())
        else:
            writer.add_key_value(name, field.contents(), kind)
    for tensor in reader.tensors:
        if tensor.name == drop:
            continue
        shape = [int(d) for d in reversed(tensor.shape)]
        if tensor.name == tensor_type_for:
            rows, cols = shape
            blocks = np.zeros((rows, cols // 32 * 18), dtype=np.uint8)
            writer.add_tensor(tensor.name, blocks, raw_dtype=gguf.GGMLQuantizationType.IQ4_NL)
        else:
            writer.add_tensor(tensor.name, np.array(tensor.data).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    args = parser.parse_args()
    t = args.tachyon
    work = Path(tempfile.mkdtemp(prefix="tachyon-model-commands-"))
    try:
        tiny = tiny_models.write_model("llama_gqa", "f32", work / "tiny.gguf")

        # --mla-attention: the decompressed path gives the absorbed path's perplexity (to float
        # rounding) and greedy text on an MLA model; a model without MLA refuses it.
        mla = tiny_models.write_model("deepseek_v2_lite", "f32", work / "mla.gguf")
        text = work / "text.txt"
        text.write_text((ROOT.parent / "shared/data/corpus/tinyshakespeare.txt").read_text()[:3000])
        perplexities = {}
        for mode in ("absorbed", "decompressed", "auto"):
            result = run(t, "perplexity", "-m", str(mla), "-f", str(text), "--ctx", "128",
                         "--json", "--mla-attention", mode, "-t", "2")
            perplexities[mode] = json.loads(result.stdout)["perplexity"] if result.returncode == 0 else None
        check("perplexity --mla-attention: each path within 1e-5 of the absorbed one",
              all(p is not None and abs(p / perplexities["absorbed"] - 1) < 1e-5
                  for p in perplexities.values()), repr(perplexities))
        texts = [run(t, "generate", "-m", str(mla), "-p", "To be or not to be", "-n", "12",
                     "--temperature", "0", "--mla-attention", mode).stdout
                 for mode in ("absorbed", "decompressed")]
        check("generate --mla-attention decompressed: the absorbed path's greedy text",
              texts[0] == texts[1] and texts[0] != "", repr(texts))
        expect_error(t, "--mla-attention on a model without MLA",
                     ["perplexity", "-m", str(tiny), "-f", str(text), "--ctx", "64",
                      "--mla-attention", "auto"],
                     f"tachyon: error: {tiny}: --mla-attention: the model has no multi-head "
                     "latent attention (MLA)")

        # generate: greedy is deterministic, seeds make sampling reproducible.
        greedy = [run(t, "generate", "-p", "The capital of France is", "-n", "16",
                      "--temperature", "0", "-t", "1").stdout for _ in range(2)]
        check("generate --temperature 0 is deterministic", greedy[0] == greedy[1] and greedy[0].strip(),
              repr(greedy))
        check("generate prints only the generated text", not greedy[0].startswith("The capital"),
              repr(greedy[0]))
        seeded = [run(t, "generate", "-p", "Once upon a time", "-n", "24", "--seed", seed,
                      "-t", "1").stdout for seed in ("7", "7", "8")]
        check("generate --seed: same seed, same text", seeded[0] == seeded[1], repr(seeded[:2]))
        check("generate --seed: another seed, other text", seeded[0] != seeded[2], repr(seeded))
        result = run(t, "generate", "-p", "Hello", "-n", "8", "--temperature", "0", "--json",
                     "--ignore-eos")
        report = json.loads(result.stdout)
        check("generate --json reports counts and timings",
              report["completion_tokens"] == 8 and report["prompt_tokens"] == 1 and
              report["finish_reason"] == "length" and report["generation_tokens_per_second"] > 0,
              result.stdout)
        result = run(t, "generate", "-p", "What is 2+2?", "--chat", "-n", "24", "--temperature", "0")
        check("generate --chat answers", result.returncode == 0 and result.stdout.strip(),
              result.stderr)
        stop = run(t, "generate", "-p", "1, 2, 3, 4,", "-n", "40", "--temperature", "0",
                   "--stop", "8")
        check("generate --stop ends before the stop string",
              stop.returncode == 0 and "8" not in stop.stdout and "7" in stop.stdout,
              repr(stop.stdout))

        # generate with a constrained output (as the server's response_format).
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                   "age": {"type": "integer", "minimum": 0}},
                  "required": ["name", "age"], "additionalProperties": False}
        result = run(t, "generate", "--chat", "-p", "A person as JSON.", "-n", "60",
                     "--temperature", "0", "--json-schema", json.dumps(schema))
        try:
            person = json.loads(result.stdout)
        except json.JSONDecodeError:
            person = None
        check("generate --json-schema: JSON with the schema's fields",
              isinstance(person, dict) and set(person) == {"name", "age"} and
              isinstance(person["age"], int) and person["age"] >= 0, repr(result.stdout))
        schema_file = work / "schema.json"
        schema_file.write_text(json.dumps(schema))
        from_file = run(t, "generate", "--chat", "-p", "A person as JSON.", "-n", "60",
                        "--temperature", "0", "--json-schema", "@" + str(schema_file))
        check("generate --json-schema @FILE: the same", from_file.stdout == result.stdout,
              repr(from_file.stdout))
        result = run(t, "generate", "-p", "The year is", "-n", "10", "--temperature", "0",
                     "--regex", " [0-9]{4}\\.")
        check("generate --regex: the whole output matches",
              len(result.stdout.strip()) == 5 and result.stdout.strip()[:4].isdigit(),
              repr(result.stdout))
        grammar = work / "answer.ebnf"
        grammar.write_text('root ::= ("yes" | "no") "."\n')
        result = run(t, "generate", "--chat", "-p", "Is water wet?", "-n", "10",
                     "--grammar", "@" + str(grammar), "--json")
        check("generate --grammar @FILE: in the language",
              json.loads(result.stdout)["text"] in ("yes.", "no."), result.stdout)
        expect_error(t, "a regex that does not parse", ["generate", "-p", "a", "--regex", "("],
                     "tachyon: error: the regex could not be compiled: Regex parsing error at "
                     "position 2: The parenthesis is not closed.")
        expect_error(t, "a schema keyword the grammar would skip",
                     ["generate", "-p", "a", "--json-schema", '{"type": "array", "uniqueItems": true}'],
                     "tachyon: error: keyword 'uniqueItems' at the schema's root is not supported")
        expect_error(t, "two constraints at once",
                     ["generate", "-p", "a", "--regex", "a", "--json-object"],
                     "tachyon: error: --json-schema, --regex, --grammar and --json-object exclude "
                     "each other")

        # chat: turns, /reset, history, and Ctrl-C stopping a reply but not the program.
        chat = run(t, "chat", "--temperature", "0", "-n", "12", "-t", "1",
                   stdin="Say hello.\n/reset\nName a color.\n/exit\n")
        replies = [line for line in chat.stdout.splitlines() if line.strip()]
        check("chat replies to each message", chat.returncode == 0 and len(replies) == 2,
              repr(chat.stdout) + chat.stderr)
        process = subprocess.Popen([t, "chat", "--temperature", "0", "--ignore-eos", "-t", "1"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        process.stdin.write("Tell me a very long story.\n")
        process.stdin.flush()
        time.sleep(3)  # the reply is streaming by now (it would run until the context is full)
        process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        process.stdin.write("/exit\n")
        process.stdin.flush()
        try:
            out, err = process.communicate(timeout=60)
            check("Ctrl-C stops the reply, not the program",
                  process.returncode == 0 and "(reply stopped)" in err and out.strip(),
                  f"exit {process.returncode}, stderr {err!r}")
        except subprocess.TimeoutExpired:
            process.kill()
            check("Ctrl-C stops the reply, not the program", False, "did not exit after /exit")

        # perplexity and bench print what they promise.
        corpus = work / "corpus.txt"
        corpus.write_text((ROOT.parent / "shared/data/corpus/gpl-3.0.txt").read_text()[:6000])
        result = run(t, "perplexity", "-f", str(corpus), "--ctx", "128", "--json")
        report = json.loads(result.stdout) if result.returncode == 0 else {}
        check("perplexity --json", report.get("tokens", 0) > 0 and 1 < report.get("perplexity", 0) < 1000,
              result.stdout + result.stderr)
        result = run(t, "bench", "-m", str(tiny), "-p", "32", "-n", "8", "-r", "2", "--json")
        report = json.loads(result.stdout) if result.returncode == 0 else []
        check("bench --json lists pp, tg (mean and each repetition), the process's anonymous "
              "memory and the decode roofline",
              [r["test"] for r in report] == ["pp32", "tg8", "memory", "roofline"] and
              all(len(r["samples"]) == 2 and min(r["samples"]) > 0 and
                  abs(sum(r["samples"]) / 2 - r["tokens_per_second"])
                  < 1e-6 * r["tokens_per_second"] for r in report[:2]) and
              report[2].get("anonymous_resident_bytes", 0) > 0 and
              report[3].get("tokens_per_second", 0) > 0 and
              report[3].get("read_bandwidth_gb_per_s", 0) > 0 and
              report[3].get("bytes_per_token", 0) > 0 and
              report[3].get("tg_fraction_of_roofline", 0) > 0,
              result.stdout + result.stderr)
        result = run(t, "bench", "-m", str(tiny), "-p", "16", "-n", "4", "-r", "1", "--json",
                     "--no-roofline")
        report = json.loads(result.stdout) if result.returncode == 0 else []
        check("bench --no-roofline: pp and tg (and memory), no roofline",
              [r["test"] for r in report] == ["pp16", "tg4", "memory"],
              result.stdout + result.stderr)
        # Speculation: the copy test with and without it, and the drafts' counts (the default
        # model copies the repeated prompt, so guesses are made and most are accepted).
        result = run(t, "bench", "-p", "0", "-n", "32", "-r", "1", "--json", "--no-roofline",
                     "--speculative", "ngram", "--spec-fixed")
        report = json.loads(result.stdout) if result.returncode == 0 else []
        spec = next((r.get("speculative", {}) for r in report if r["test"] == "copy32_ngram"), {})
        check("bench --speculative ngram: copy32 and copy32_ngram with the draft counts",
              [r["test"] for r in report] == ["tg32", "copy32", "copy32_ngram", "memory"] and
              spec.get("draft_tokens", 0) > 0 and
              0 < spec.get("accepted_draft_tokens", 0) <= spec["draft_tokens"] and
              spec.get("mode") == "ngram", result.stdout + result.stderr)
        result = run(t, "generate", "-p", "one two three four one two three four one two",
                     "-n", "12", "--temp", "0", "--json", "--speculative", "ngram", "--spec-fixed")
        report = json.loads(result.stdout) if result.returncode == 0 else {}
        plain = run(t, "generate", "-p", "one two three four one two three four one two",
                    "-n", "12", "--temp", "0", "--json")
        plain_report = json.loads(plain.stdout) if plain.returncode == 0 else {}
        check("generate --json --speculative ngram: the same ids, and the draft counts",
              report.get("completion_ids") == plain_report.get("completion_ids") and
              report.get("speculative", {}).get("draft_tokens", 0) > 0,
              result.stdout + result.stderr)

        # Bad input: one clear line, non-zero exit, never a crash.
        expect_error(t, "an empty prompt", ["generate", "-p", ""],
                     "tachyon: error: the prompt is empty")
        expect_error(t, "a prompt longer than the context",
                     ["generate", "-p", "word " * 39 + "word", "-c", "16"],
                     "tachyon: error: prompt has 40 tokens, context is 16")
        expect_error(t, "a context larger than the model's", ["generate", "-m", str(tiny), "-p", "a", "-c", "4096"],
                     "tachyon: error: context size 4096 is larger than the model's 128")
        expect_error(t, "llama.cpp numerics on weights they do not cover",
                     ["generate", "-m", str(tiny), "-p", "a", "--numerics", "llama.cpp"],
                     f"tachyon: error: {tiny}: llama.cpp numerics cover Q4_1 and Q8_0 weights; "
                     f"the output matrix is F32")
        mamba = write_variant(work / "mamba.gguf", arch="mamba")
        expect_error(t, "an unsupported architecture", ["generate", "-m", str(mamba), "-p", "a"],
                     f"tachyon: error: {mamba}: architecture 'mamba' is not supported; "
                     f"supported: llama, qwen2, qwen3, qwen2moe, qwen3moe, deepseek2, gemma3")
        iq4 = write_variant(work / "iq4.gguf", tensor_type_for="blk.0.attn_q.weight")
        expect_error(t, "an unsupported tensor type", ["generate", "-m", str(iq4), "-p", "a"],
                     f"tachyon: error: {iq4}: tensor 'blk.0.attn_q.weight' has type IQ4_NL, "
                     f"which tachyon cannot compute with yet")
        missing = write_variant(work / "missing.gguf", drop="blk.1.ffn_down.weight")
        expect_error(t, "a model missing a tensor", ["generate", "-m", str(missing), "-p", "a"],
                     f"tachyon: error: {missing}: tensor 'blk.1.ffn_down.weight' is missing")
        expect_error(t, "an invalid sampling value", ["generate", "-p", "a", "--top-p", "1.5"],
                     "tachyon: error: top_p must be in (0, 1], got 1.5")
        expect_error(t, "a malformed --logit-bias", ["generate", "-p", "a", "--logit-bias", "x"],
                     "tachyon: error: --logit-bias 'x' is not ID=BIAS")
        expect_error(t, "chat with a model without a template", ["chat", "-m", str(tiny)],
                     f"tachyon: error: {tiny} has no chat template (tokenizer.chat_template)")
        expect_error(t, "perplexity on a missing file", ["perplexity", "-f", "/no/such.txt"],
                     "tachyon: error: cannot open /no/such.txt")
        text = work / "text.txt"
        text.write_text("To be, or not to be, that is the question. " * 20)
        expect_error(t, "perplexity --sink-tokens without --stream or --stride",
                     ["perplexity", "-f", str(text), "--sink-tokens", "4"],
                     "tachyon: error: --sink-tokens goes with --stream or --stride")
        expect_error(t, "perplexity --sink-tokens leaving no room in the window",
                     ["perplexity", "-f", str(text), "--ctx", "64", "--stride", "16",
                      "--sink-tokens", "60"],
                     "tachyon: error: --stride 16 and --sink-tokens 60 must leave room in --ctx 64")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
