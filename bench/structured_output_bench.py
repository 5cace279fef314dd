#!/usr/bin/env python3
"""Structured-output benchmark (issue 27): what a JSON schema costs per token.

    .venv/bin/python bench/structured_output_bench.py [--decode-schemas 24] [--skip-llamacpp]

- Mask engine (build/bench/mask_benchmark, one thread): for the schema suite of
  tests/api/schema_suite.py, compile time and per-token mask time along random walks of allowed
  tokens, with the default model's 49K vocabulary and Gemma 3's 262K one.
- Decode: the first --decode-schemas schemas of the suite through `tachyon serve` (greedy,
  frequency_penalty 1.5, streamed, one request at a time): decode tokens/s with the schema
  against the same prompt without it, run for exactly as many tokens (ignore_eos), prompt
  processing excluded (time from the first to the last token); the median of the per-pair
  ratios over three rounds.
- llama.cpp (llama-cpp-python from .venv-llamacpp, tools/requirements-llamacpp.txt): the share
  of the suite its json_schema converter accepts, and decode tokens/s with and without the
  grammar over the same schemas.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "api"))
from schema_suite import suite  # noqa: E402
from server_fixture import TachyonServer  # noqa: E402

HOME = Path(os.environ.get("TACHYON_HOME", Path.home() / ".cache" / "tachyon"))
DEFAULT_MODEL = HOME / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = HOME / "models" / "gemma-3-270m-q4_k_m.gguf"


def mask_rows(schemas_file: str) -> dict:
    rows = {}
    for name, model in (("default (49K)", DEFAULT_MODEL), ("gemma3 (262K)", GEMMA)):
        out = subprocess.run([str(ROOT / "build" / "bench" / "mask_benchmark"), str(model),
                              schemas_file], check=True, capture_output=True, text=True)
        rows[name] = json.loads(out.stdout)
    return rows


def stream_rate(client, model, messages, **extra) -> tuple[int, float, str]:
    start = time.perf_counter()
    first = last = None
    tokens = 0
    text = []
    stream = client.chat.completions.create(model=model, messages=messages, stream=True,
                                            stream_options={"include_usage": True}, **extra)
    for chunk in stream:
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            first = first or now
            last = now
            text.append(chunk.choices[0].delta.content)
    return tokens, (last - first) if first and last else 0.0, "".join(text)


def decode_rows(count: int, rounds: int = 3) -> dict:
    """Each schema's answer, then the same prompt free for as many tokens, `rounds` times. A
    shared machine's speed can change between phases for seconds at a time, so the result is
    the median of the per-pair ratios (a pair takes a fraction of a second); the aggregate rates
    are reported beside it."""
    import openai
    import statistics
    entries = suite()[:count]
    ratios = []
    totals = {"schema": [0, 0.0], "free": [0, 0.0]}
    with TachyonServer(str(ROOT / "build" / "tachyon"), args=["-t", "2"]) as server:
        client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        for _ in range(rounds):
            for name, schema, prompt in entries:
                messages = [{"role": "user", "content": prompt}]
                fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
                n, seconds, _ = stream_rate(client, model, messages, temperature=0,
                                            max_tokens=320, frequency_penalty=1.5,
                                            response_format=fmt)
                if n < 8:
                    continue  # too short to time
                m, free_seconds, _ = stream_rate(client, model, messages, temperature=0,
                                                 max_tokens=n, frequency_penalty=1.5,
                                                 extra_body={"ignore_eos": True})
                if seconds <= 0 or free_seconds <= 0:
                    continue
                ratios.append(((n - 1) / seconds) / ((m - 1) / free_seconds))
                totals["schema"][0] += n - 1
                totals["schema"][1] += seconds
                totals["free"][0] += m - 1
                totals["free"][1] += free_seconds
    rates = {key: tokens / seconds for key, (tokens, seconds) in totals.items()}
    return {"pairs": len(ratios), "median_pair_ratio": statistics.median(ratios),
            "tokens": totals["schema"][0], "with_schema": rates["schema"],
            "without": rates["free"]}


def llamacpp_rows(count: int) -> dict:
    python = ROOT / ".venv-llamacpp" / "bin" / "python"
    script = r'''
import json, sys, time
from llama_cpp import Llama, LlamaGrammar
schemas = json.load(open(sys.argv[1])); count = int(sys.argv[2]); prompts = json.load(open(sys.argv[3]))
ok = []
for s in schemas:
    try:
        LlamaGrammar.from_json_schema(json.dumps(s), verbose=False); ok.append(True)
    except Exception:
        ok.append(False)
llm = Llama(model_path=sys.argv[4], n_ctx=2048, n_threads=2, verbose=False)
def rate(prompt, **kw):
    t0 = time.perf_counter(); first = None; n = 0
    for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": prompt}], stream=True, temperature=0, frequency_penalty=1.5, **kw):
        d = chunk["choices"][0]["delta"].get("content")
        if d:
            n += 1; first = first or time.perf_counter(); last = time.perf_counter()
    return n, (last - first) if first else 0.0
tot = {"schema": [0, 0.0], "free": [0, 0.0]}
for s, p, supported in list(zip(schemas, prompts, ok))[:count]:
    if not supported: continue
    g = LlamaGrammar.from_json_schema(json.dumps(s), verbose=False)
    n, sec = rate(p, grammar=g, max_tokens=320)
    if n < 8: continue
    m, sec2 = rate(p, max_tokens=n)
    if m < 8: continue
    tot["schema"][0] += n - 1; tot["schema"][1] += sec; tot["free"][0] += m - 1; tot["free"][1] += sec2
r = {k: t / s for k, (t, s) in tot.items() if s > 0}
print(json.dumps({"supported": sum(ok), "schemas": len(ok), "with_grammar": r.get("schema"), "without": r.get("free"), "ratio": r.get("schema", 0) / r.get("free", 1)}))
'''
    with tempfile.TemporaryDirectory() as tmp:
        schemas = Path(tmp) / "schemas.json"
        prompts = Path(tmp) / "prompts.json"
        schemas.write_text(json.dumps([entry[1] for entry in suite()]))
        prompts.write_text(json.dumps([entry[2] for entry in suite()]))
        out = subprocess.run([str(python), "-c", script, str(schemas), str(count), str(prompts),
                              str(DEFAULT_MODEL)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decode-schemas", type=int, default=24)
    parser.add_argument("--skip-llamacpp", action="store_true")
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump([entry[1] for entry in suite()], handle)
    result = {"mask": mask_rows(handle.name), "decode": decode_rows(args.decode_schemas)}
    os.unlink(handle.name)
    if not args.skip_llamacpp:
        result["llamacpp"] = llamacpp_rows(args.decode_schemas)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
