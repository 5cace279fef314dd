#!/usr/bin/env python3
"""MoE expert load and the expert cache through the server (issue 24), with the official openai
client: a server with --experts-mem answers what a server with every expert resident answers;
GET /admin/experts gives every MoE layer's selection counts, their imbalance and the cache's
counters, to the admin key only (401 for other keys, 403 when the server has keys but no
--admin-key, open on a server without keys); /metrics carries tachyon:expert_imbalance and
the cache's series; a cache smaller than one layer's experts stops the server with a clear
error.

    .venv/bin/python tests/api/experts_test.py --tachyon build/tachyon \
        --tiny-models build/tests/models/tiny_models
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, section  # noqa: E402
from server_fixture import (TachyonServer, http_get, parse_prometheus,  # noqa: E402
                            parse_prometheus_samples)

ROOT = Path(__file__).resolve().parents[2]
KEY, ADMIN = "sk-tenant-experts-test", "sk-admin-experts-test"
PROMPTS = [[(7 * i + 3 * j) % 270 + 5 for j in range(6 + 5 * i)] for i in range(5)]


def answers(server: TachyonServer, api_key: str) -> list[str]:
    client = openai.OpenAI(base_url=server.v1, api_key=api_key, max_retries=0)
    model_id = client.models.list().data[0].id
    return [client.completions.create(model=model_id, prompt=prompt, max_tokens=20, temperature=t,
                                      seed=5).choices[0].text
            for prompt in PROMPTS for t in (0, 0.9)]


def admin_report(server: TachyonServer, key: str | None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    status, body = http_get(server.url + "/admin/experts", headers=headers)
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, {"raw": body.decode(errors="replace")}


def test_cache_and_reports(tachyon: str, model: str) -> None:
    with TachyonServer(tachyon, model=model) as server:
        expected = answers(server, "unused")
        status, report = admin_report(server, None)
        check("no keys: /admin/experts is open", status == 200, report)
    args = ["--api-key", KEY, "--admin-key", ADMIN, "--experts-mem", "0.6"]
    with TachyonServer(tachyon, model=model, args=args) as server:
        got = answers(server, KEY)
        check("--experts-mem: every answer as with every expert resident", got == expected,
              [(a, b) for a, b in zip(got, expected) if a != b])
        status, report = admin_report(server, ADMIN)
        check("/admin/experts answers the admin key", status == 200, report)
        layers = report.get("layers", [])
        trunk = [layer for layer in layers if layer["layer"] < 3]
        check("/admin/experts: every MoE layer's counts, one per expert",
              len(trunk) >= 2 and all(len(layer["counts"]) == 8 for layer in layers), layers)
        check("/admin/experts: each trunk layer counted the same tokens, 2 experts each",
              len({layer["selections"] for layer in trunk}) == 1 and trunk[0]["selections"] > 0
              and trunk[0]["selections"] % 2 == 0, trunk)
        check("/admin/experts: imbalance is the most chosen expert over the mean",
              all(abs(layer["imbalance"] - max(layer["counts"]) * len(layer["counts"])
                      / max(1, sum(layer["counts"]))) < 1e-9 for layer in trunk), trunk)
        cache = report.get("cache") or {}
        check("/admin/experts: the cache's counters (reads from the file, bounded residency)",
              cache.get("misses", 0) > 0 and cache.get("hits", 0) > 0 and cache["bytes_read"] > 0
              and 0 < cache["resident_bytes"] <= cache["capacity_bytes"] < cache["expert_bytes"],
              cache)
        status, _ = admin_report(server, KEY)
        check("/admin/experts refuses a tenant key with 401", status == 401, status)
        status, _ = admin_report(server, None)
        check("/admin/experts refuses a request without a key with 401", status == 401, status)
        status, body = http_get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
        samples = parse_prometheus_samples(body.decode())
        imbalance = {labels.get("layer"): value for name, labels, value in samples
                     if name == "tachyon:expert_imbalance"}
        check("/metrics: an expert_imbalance gauge per MoE layer, as /admin/experts says",
              status == 200 and imbalance == {str(layer["layer"]): layer["imbalance"]
                                              for layer in layers}, (imbalance, layers))
        values = parse_prometheus(body.decode())
        check("/metrics: the expert cache's hits, misses, bytes read and residency",
              all(values.get(f"tachyon:expert_cache_{name}", -1) > 0
                  for name in ("hits_total", "misses_total", "read_bytes_total",
                               "resident_bytes", "capacity_bytes")),
              {k: v for k, v in values.items() if "expert_cache" in k})
    with TachyonServer(tachyon, model=model, args=["--api-key", KEY]) as server:
        status, report = admin_report(server, KEY)
        check("keys but no --admin-key: /admin/experts answers 403", status == 403, report)
        check("403's error says what to do",
              "--admin-key" in report.get("error", {}).get("message", ""), report)


def test_too_small(tachyon: str, model: str) -> None:
    result = subprocess.run([tachyon, "serve", "-m", model, "--port", "0", "--experts-mem", "1K"],
                            capture_output=True, text=True, timeout=120)
    check("--experts-mem below one layer's experts: the server does not start, and says why",
          result.returncode == 1 and "smaller than one layer's experts" in result.stderr,
          result.stderr[-600:])
    result = subprocess.run([tachyon, "serve", "-m", model, "--port", "0", "--experts-mem", "lots"],
                            capture_output=True, text=True, timeout=120)
    check("--experts-mem that is no size: a clear error",
          result.returncode == 1 and "--experts-mem 'lots'" in result.stderr, result.stderr[-600:])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--tiny-models", default=str(ROOT / "build/tests/models/tiny_models"))
    args = parser.parse_args()
    model = str(Path(args.tiny_models) / "deepseek_v3_groups.q8_0.gguf")
    section("cache and reports", test_cache_and_reports, args.tachyon, model)
    section("too small", test_too_small, args.tachyon, model)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
