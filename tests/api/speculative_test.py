#!/usr/bin/env python3
"""Speculative decoding through the HTTP API, checked with the official openai client: a server
started with `--speculative suffix` answers every request (chat and completions, greedy and
seeded, streamed and not, with logprobs and stop sequences) with exactly the bytes a server
without speculation gives; `/metrics` counts drafts per proposer; `"speculative": false` opts a
request out; `--speculative mtp` on a tiny DeepSeek-V3 model with an MTP layer gives the same
tokens as without, greedy and seeded, and counts its drafts; and `--speculative` refuses modes
it does not know (and mtp on a model without the layer) with a clear error.

    .venv/bin/python tests/api/speculative_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from server_fixture import TachyonServer, parse_prometheus, http_get  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"


def passages(count: int) -> list[str]:
    text = SHAKESPEARE.read_text()
    out = []
    for i in range(count):
        start = text.index("\n", (i * 7919 * 37) % (len(text) - 3000)) + 1
        end = start
        for _ in range(5):
            end = text.index("\n", end) + 1
        out.append(text[start:end])
    return out


def spec_metrics(url: str) -> dict[str, float]:
    status, body = http_get(url + "/metrics")
    assert status == 200, status
    values = {}
    for line in body.decode().splitlines():
        if line.startswith("tachyon:spec_decode_") and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def total(values: dict[str, float], series: str) -> float:
    return sum(v for k, v in values.items() if k.startswith(series + "{"))


def requests_for(model: str) -> list[tuple[str, dict]]:
    """(what, create() arguments) pairs; each is sent to both servers."""
    out = []
    for i, passage in enumerate(passages(8)):
        first_line = passage.split("\n")[0]
        copy = [{"role": "user", "content": "Repeat this text exactly:\n\n" + passage}]
        out.append((f"chat greedy {i}", dict(kind="chat", model=model, messages=copy,
                                             temperature=0, max_tokens=60)))
        out.append((f"chat seeded stream {i}",
                    dict(kind="chat", model=model, messages=copy, temperature=0.8, top_p=0.95,
                         presence_penalty=0.3, seed=100 + i, max_tokens=40, stream=True)))
        out.append((f"completion logprobs stop {i}",
                    dict(kind="completion", model=model,
                         prompt=passage + "\nThe same text again:\n" + first_line,
                         temperature=0, max_tokens=48, logprobs=2,
                         stop=[passage.split()[-1]])))
    return out


def run(client: openai.OpenAI, args: dict) -> tuple:
    args = dict(args)
    kind = args.pop("kind")
    if kind == "chat":
        if args.get("stream"):
            chunks = list(client.chat.completions.create(**args))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reasons = [c.choices[0].finish_reason for c in chunks
                       if c.choices and c.choices[0].finish_reason]
            return text, reasons
        response = client.chat.completions.create(**args)
        return (response.choices[0].message.content, response.choices[0].finish_reason,
                response.usage.completion_tokens)
    response = client.completions.create(**args)
    choice = response.choices[0]
    return (choice.text, choice.finish_reason, response.usage.completion_tokens,
            choice.logprobs.tokens, choice.logprobs.token_logprobs, choice.logprobs.top_logprobs)


def test_same_bytes(tachyon: str, model: str | None) -> None:
    common = ["-c", "2048", "--kv-cache-mem", "256MiB"]
    # --spec-fixed: how many guesses pay off depends on the machine's speed; these checks must
    # see drafts on every machine. The third server drafts with the model itself (guesses that
    # are always right, though a self-draft never pays).
    draft_model = model or str(Path.home() / ".cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    with TachyonServer(tachyon, model, args=common) as off, \
            TachyonServer(tachyon, model, args=common + ["--speculative", "suffix",
                                                        "--spec-max-tokens", "8",
                                                        "--spec-fixed"]) as on, \
            TachyonServer(tachyon, model, args=common + ["--draft-model", draft_model,
                                                        "--spec-fixed"]) as draft:
        off_client = openai.OpenAI(base_url=off.v1, api_key="unused", max_retries=0, timeout=300)
        on_client = openai.OpenAI(base_url=on.v1, api_key="unused", max_retries=0, timeout=300)
        model_id = off_client.models.list().data[0].id
        draft_client = openai.OpenAI(base_url=draft.v1, api_key="unused", max_retries=0,
                                     timeout=300)
        differing, differing_draft = [], []
        for what, args in requests_for(model_id):
            expected = run(off_client, args)
            if run(on_client, args) != expected:
                differing.append(what)
            if run(draft_client, args) != expected:
                differing_draft.append(what)
        check("every answer is byte-identical with --speculative suffix", not differing, differing)
        check("every answer is byte-identical with --draft-model", not differing_draft,
              differing_draft)
        draft_values = spec_metrics(draft.url)
        # Its guesses are the model's greedy tokens: the greedy requests accept them all, the
        # sampled ones (temperature 0.8) only some.
        check("/metrics counts the draft model's drafts, most accepted",
              total(draft_values, "tachyon:spec_decode_num_draft_tokens_total") > 0 and
              total(draft_values, "tachyon:spec_decode_num_accepted_tokens_total") >=
              0.5 * total(draft_values, "tachyon:spec_decode_num_draft_tokens_total"),
              draft_values)
        values = spec_metrics(on.url)
        info(f"spec metrics: {values}")
        drafted = total(values, "tachyon:spec_decode_num_draft_tokens_total")
        accepted = total(values, "tachyon:spec_decode_num_accepted_tokens_total")
        check("/metrics counts verified and accepted draft tokens", drafted > 0 and accepted > 0,
              values)
        check("/metrics has a series per proposer",
              all(f'tachyon:spec_decode_num_drafts_total{{model_name="{model_id}",proposer="{p}"}}'
                  in values for p in ("ngram", "suffix")), sorted(values))
        check("/metrics mean accepted length is accepted / drafts",
              total(values, "tachyon:spec_decode_mean_accepted_length") > 0, values)
        check("a server without --speculative drafts nothing",
              total(spec_metrics(off.url), "tachyon:spec_decode_num_draft_tokens_total") == 0)

        # Opting out: the same answer and not one more draft.
        args = requests_for(model_id)[0][1]
        before = total(spec_metrics(on.url), "tachyon:spec_decode_num_draft_tokens_total")
        opted = dict(args, extra_body={"speculative": False})
        check('"speculative": false gives the same answer', run(on_client, opted) ==
              run(off_client, args))
        after = total(spec_metrics(on.url), "tachyon:spec_decode_num_draft_tokens_total")
        check('"speculative": false verifies no drafts', after == before, (before, after))
        bad = http_post_json(on.url + "/v1/chat/completions",
                             {"model": model_id, "messages": [{"role": "user", "content": "hi"}],
                              "speculative": "yes"})
        check('"speculative": "yes" is a 400 naming the field',
              bad[0] == 400 and b"speculative" in bad[1], bad)


def http_post_json(url: str, body: dict) -> tuple[int, bytes]:
    import json
    import urllib.error
    import urllib.request
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_flag_errors(tachyon: str, tiny_models: str) -> None:
    for flags, expected in ((["--speculative", "draft"], "needs --draft-model"),
                            (["--speculative", "mtp"], "multi-token prediction"),
                            (["--speculative", "bogus"], "unknown speculative mode"),
                            (["--speculative", "ngram", "--draft-model", "x.gguf"],
                             "--draft-model is for --speculative draft"),
                            (["--draft-model", "/nonexistent.gguf"], "/nonexistent.gguf"),
                            (["--draft-model", str(Path(tiny_models) / "llama_gqa.f32.gguf")],
                             "must share the model's vocabulary")):
        result = subprocess.run([tachyon, "generate", "-p", "hi", *flags],
                                capture_output=True, text=True, timeout=60)
        check(f"{' '.join(flags)}: exit 1 and a clear message",
              result.returncode == 1 and expected in result.stderr, result.stderr.strip())


def test_mtp(tachyon: str, tiny_models: str) -> None:
    """The MTP layer of the tiny DeepSeek-V3 model (random weights: its guesses are mostly
    wrong, which exercises the rollback) through /v1/completions, against a server without it."""
    model = str(Path(tiny_models) / "deepseek_v3_groups.f32.gguf")
    prompts = [[(7 * i + 3 * j) % 270 + 5 for j in range(6 + 5 * i)] for i in range(6)]
    answers = {}
    for mode in ("off", "mtp"):
        args = ["--speculative", mode, "--spec-max-tokens", "3", "--spec-fixed"]
        with TachyonServer(tachyon, model=model, args=args) as server:
            client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0)
            model_id = client.models.list().data[0].id
            answers[mode] = [client.completions.create(
                model=model_id, prompt=prompt, max_tokens=24, temperature=temperature,
                seed=11, logprobs=2).choices[0] for prompt in prompts for temperature in (0, 0.8)]
            if mode == "mtp":
                values = spec_metrics(server.url)
                drafted = sum(v for k, v in values.items()
                              if k.startswith("tachyon:spec_decode_num_draft_tokens_total{")
                              and 'proposer="mtp"' in k)
                check("mtp: /metrics counts the layer's drafts", drafted > 0, values)
    check("mtp: every answer's text and logprobs as without speculation",
          [(c.text, c.logprobs.tokens, c.logprobs.token_logprobs) for c in answers["mtp"]] ==
          [(c.text, c.logprobs.tokens, c.logprobs.token_logprobs) for c in answers["off"]],
          [(a.text, b.text) for a, b in zip(answers["mtp"], answers["off"]) if a.text != b.text])
    result = subprocess.run([tachyon, "serve", "-m", str(Path(tiny_models) / "deepseek_v2_lite.f32.gguf"),
                             "--port", "0", "--speculative", "mtp"],
                            capture_output=True, text=True, timeout=120)
    check("mtp on a model without the layer: the server does not start, and says why",
          result.returncode == 1 and "multi-token prediction" in result.stderr, result.stderr[-600:])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", help="GGUF file (default: tachyon's default model)")
    parser.add_argument("--tiny-models", default=str(ROOT / "build/tests/models/tiny_models"),
                        help="folder of the tiny test models (another vocabulary)")
    args = parser.parse_args()
    section("same bytes", test_same_bytes, args.tachyon, args.model)
    section("flag errors", test_flag_errors, args.tachyon, args.tiny_models)
    section("mtp", test_mtp, args.tachyon, args.tiny_models)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
