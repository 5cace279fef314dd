#!/usr/bin/env python3
"""The beyond-RAM path (--experts-mem, issue 24) on a model whose routed experts are most of its
bytes: tools/make_random_moe_model.py --shape small (deepseek2, 4 layers, 64 experts of 512 per
MoE layer: ~175 MiB of its ~260 MiB are routed experts), run with a cache of 35% of them.
Checked: the same tokens as with every expert resident (`tachyon generate`, greedy and seeded);
the anonymous resident memory (RssAnon, from `tachyon bench --json`) is that of the resident run
less the experts plus at most the cache (and the embedding's copy in the file's layout, which
--experts-mem keeps so that only experts are read from the file after load); the cache really
reads experts from the file.
And the MLA latent cache in 8 bits (`--cache-type q8`, read in place by the attention kernels)
through `tachyon serve` with the official openai client: each prompt's greedy answer alone is
its answer among concurrent requests, a prefix-cache hit answers as the cold request did, and
a token's latent costs the q8 bytes (34 per 32 values).

    .venv/bin/python tests/runtime/experts_memory_test.py --tachyon build/tachyon --work DIR
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/api"))
from checks import check, exit_status, info, section  # noqa: E402
from server_fixture import TachyonServer, http_get, parse_prometheus  # noqa: E402

MIB = 1 << 20


def make_model(work: Path) -> str:
    result = subprocess.run([sys.executable, str(ROOT / "tools/make_random_moe_model.py"),
                             "--shape", "small", "--out", str(work)],
                            capture_output=True, text=True, check=True, timeout=300)
    return result.stdout.strip().splitlines()[-1]


def tensor_bytes(model: str, name: str) -> int:
    import gguf  # the venv's (make_random_moe_model.py writes with it)
    return next(int(t.n_bytes) for t in gguf.GGUFReader(model).tensors if t.name == name)


def generate(tachyon: str, model: str, extra: list[str]) -> str:
    result = subprocess.run([tachyon, "generate", "-m", model, "-p", "The experts of layer",
                             "-n", "24", "-t", "2", *extra], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-800:]
    return result.stdout


def bench(tachyon: str, model: str, extra: list[str]) -> dict:
    result = subprocess.run([tachyon, "bench", "-m", model, "-p", "64", "-n", "32", "-r", "1",
                             "-t", "2", "--no-roofline", "--json", *extra],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-800:]
    return {entry["test"]: entry for entry in json.loads(result.stdout)}


def test_beyond_ram(tachyon: str, work: Path) -> None:
    model = make_model(work)
    cache_flag = ["--experts-mem", "0.35"]
    for sampling in (["--temp", "0"], ["--temp", "0.9", "--seed", "7"]):
        resident = generate(tachyon, model, sampling)
        cached = generate(tachyon, model, sampling + cache_flag)
        check(f"same tokens with a cache of 35% of the experts ({' '.join(sampling)})",
              cached == resident and resident.strip() != "", (resident, cached))
    full = bench(tachyon, model, [])
    bounded = bench(tachyon, model, cache_flag)
    cache = bounded["experts"]["cache"]
    full_anon = full["memory"]["anonymous_resident_bytes"]
    bounded_anon = bounded["memory"]["anonymous_resident_bytes"]
    info(f"RssAnon {full_anon / MIB:.1f} MiB with every expert resident, {bounded_anon / MIB:.1f} "
         f"MiB with --experts-mem 0.35 ({cache['capacity_bytes'] / MIB:.1f} MiB of slots for "
         f"{cache['expert_bytes'] / MIB:.1f} MiB of experts); hit rate {cache['hit_rate']:.1%}, "
         f"{cache['bytes_read'] / MIB:.1f} MiB read from the file")
    check("the resident run holds the experts in anonymous memory",
          full_anon >= cache["expert_bytes"], (full_anon, cache["expert_bytes"]))
    # Slack: allocator and page-granularity noise between two runs of the same command.
    limit = (full_anon - cache["expert_bytes"] + cache["capacity_bytes"] +
             tensor_bytes(model, "token_embd.weight") + 24 * MIB)
    check("anonymous memory bounded: the resident run's, less the experts, plus the cache",
          bounded_anon <= limit, (bounded_anon / MIB, limit / MIB))
    check("the cache read experts from the file and stayed within its slots",
          cache["misses"] > 0 and cache["bytes_read"] > 0 and
          cache["resident_bytes"] <= cache["capacity_bytes"] < cache["expert_bytes"], cache)
    check("bench --json reports the expert load per MoE layer",
          len(bounded["experts"]["layers"]) == 3 and bounded["experts"]["max_imbalance"] >= 1,
          bounded["experts"])


def test_latent_q8(tachyon: str, work: Path) -> None:
    model = make_model(work)
    # Prompts of 40..180 tokens (several 16-position groups, partial last ones), as token ids.
    prompts = [[(37 * i + 11 * j) % 50000 + 100 for j in range(40 + 35 * i)] for i in range(5)]
    with TachyonServer(tachyon, model, ["-t", "2", "--cache-type", "q8"]) as server:
        client = openai.OpenAI(base_url=server.v1, api_key="none", max_retries=0)
        model_id = client.models.list().data[0].id

        def complete(prompt: list[int]):
            return client.completions.create(model=model_id, prompt=prompt, max_tokens=24,
                                             temperature=0)

        alone = [complete(prompt) for prompt in prompts]
        # The concurrent requests find their prompts' whole blocks cached: cached prefixes, the
        # rest of each prompt and the decodes of all five in shared steps.
        with ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(complete, prompts))
        texts = [c.choices[0].text for c in alone]
        check("q8 latent: each answer alone is its answer among concurrent requests",
              texts == [c.choices[0].text for c in together] and all(texts),
              (texts, [c.choices[0].text for c in together]))
        warm = complete(prompts[4])
        details = warm.usage.prompt_tokens_details
        cached = details.cached_tokens if details is not None else 0
        check("q8 latent: a prefix-cache hit answers as the cold request did",
              cached >= 160 and warm.choices[0].text == texts[4], (cached, warm.choices[0].text))
        metrics = parse_prometheus(http_get(server.url + "/metrics")[1].decode())
        # 4 layers, each a latent of 256 + 64 values: 10 groups of 32 at 34 bytes.
        check("q8 latent: 1,360 bytes per token (f16: 2,560)",
              metrics.get("tachyon:kv_cache_bytes_per_token") == 4 * 10 * 34,
              metrics.get("tachyon:kv_cache_bytes_per_token"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--work", type=Path, default=ROOT / "build/tests/runtime/experts_memory")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    section("beyond RAM", test_beyond_ram, args.tachyon, args.work)
    section("q8 latent cache", test_latent_q8, args.tachyon, args.work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
