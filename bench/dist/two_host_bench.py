#!/usr/bin/env python3
"""Two ranks as two hosts over TCP with a limited link (issue 28): each rank in its own network
namespace, joined by veth pairs on a bridge, each namespace's egress limited by a token bucket
(`tc qdisc ... tbf`) to a link rate; OpenMPI forced to TCP over that subnet. Measures the
collectives against size and `tachyon bench --tp 2` / `--pp 2` on the default model over the
link, and prints the scale model's prediction for them (bench/scale_model.py: a collective costs
log2(N) latencies plus (N-1)/N of its bytes over the link) from the link's rate, the latency of
one small message measured over the unlimited veth, and one-process measurements.

Needs root (namespaces, tc). The kernel of the machine this was written on has no `netem`
qdisc, so no delay is added: the link differs from loopback by its rate (and veth + TCP's own
latency).

    .venv/bin/python bench/dist/two_host_bench.py --rates 1000,200 \\
        --measured bench/dist/measured_spr.json [--json OUT]
    .venv/bin/python bench/dist/two_host_bench.py --report bench/dist/two_hosts_spr.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests/dist"))
from parallel_test import MPI_ENV  # noqa: E402
from scale_model import Link, collective_s, pipeline_pass_s, tp_gathers  # noqa: E402

BRIDGE = "tachyon-br0"
NAMESPACES = ("tachyon-h1", "tachyon-h2")
SUBNET = "10.77.0"


def sh(*argv: str, check: bool = True) -> None:
    subprocess.run(argv, check=check, capture_output=True)


@contextlib.contextmanager
def two_hosts(rate_mbit: int | None):
    """Namespaces tachyon-h1/h2 (10.77.0.11/.12) on a bridge (10.77.0.1), each one's egress
    limited to `rate_mbit` (None: as fast as veth goes)."""
    teardown()
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for i, ns in enumerate(NAMESPACES, 1):
        inside, outside = f"tveth{i}", f"tveth{i}b"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
        sh("ip", "link", "set", outside, "master", BRIDGE)
        sh("ip", "link", "set", outside, "up")
        sh("ip", "link", "set", inside, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.1{i}/24", "dev", inside)
        sh("ip", "-n", ns, "link", "set", inside, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        if rate_mbit:
            # A bucket of three full frames, so that messages go at the link's rate rather than
            # in bursts at veth speed, and a short queue (no buffer bloat delaying TCP's acks).
            burst = 3 * 1514
            sh("tc", "-n", ns, "qdisc", "add", "dev", inside, "root", "tbf", "rate",
               f"{rate_mbit}mbit", "burst", str(burst), "latency", "10ms")
    try:
        yield
    finally:
        teardown()


def teardown() -> None:
    for ns in NAMESPACES:
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


def mpirun_two_hosts(argv: list[str]) -> list[str]:
    """Rank 0 in the first namespace, rank 1 in the second, TCP over the bridge's subnet."""
    common = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "tcp,self",
              "--mca", "btl_tcp_if_include", f"{SUBNET}.0/24",
              "--mca", "oob_tcp_if_include", f"{SUBNET}.0/24"]
    return common + ["-np", "1", "ip", "netns", "exec", NAMESPACES[0], *argv, ":",
                     "-np", "1", "ip", "netns", "exec", NAMESPACES[1], *argv]


# mpirun's PMIx server listens on loopback only by default, which a rank in another namespace
# cannot reach: it listens on the bridge's subnet instead.
TWO_HOST_ENV = {**MPI_ENV, "PMIX_MCA_ptl_tcp_remote_connections": "1",
                "PMIX_MCA_ptl_tcp_if_include": f"{SUBNET}.0/24"}


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, **TWO_HOST_ENV})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def collectives() -> list[dict]:
    out = run(mpirun_two_hosts([str(ROOT / "build/bench/collectives_benchmark"),
                                "--max-bytes", "4194304", "--repetitions", "10"]))
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def bench(split: list[str]) -> dict[str, float]:
    argv = [str(ROOT / "build/tachyon"), "bench", "-p", "512", "-n", "128", "-r", "2",
            "-t", "1", "--no-roofline", "--json", *split]
    rows = json.loads(run(mpirun_two_hosts(argv)).strip().splitlines()[-1])
    return {row["test"]: round(row["tokens_per_second"], 2) for row in rows
            if row.get("test") in ("pp512", "tg128")}


def predict(measured: dict, link: Link) -> dict:
    """bench/scale_model.py's validate() with the collectives from the link model instead of
    measured ones: TP=2 and PP=2 pp512 / tg128 over `link`."""
    m = measured["model"]
    one = measured["one_process"]
    out = {}
    for test, tokens in (("tg128", 1), ("pp512", 512)):
        t1_s = tokens / one["t1"][test]
        busy = one["t2"][test] / (2 * one["t1"][test])
        share = max(m["rank_weight_mib"]["tp2"]) / m["rank_weight_mib"]["whole"]
        gathers = m["layers"] * sum(collective_s(2, tokens * n * size, link)
                                    for n, size in tp_gathers(m))
        # The embedding's all-reduce (tokens x hidden f32) and one token's logits gathered
        # to rank 0 (its half of the vocabulary's f32 rows from the other rank).
        extra = 2 * collective_s(2, tokens * m["hidden"] * 4, link) + \
            collective_s(2, m["vocab"] * 4, link)
        # Both "hosts" share this machine's cores and memory bus, as 2 threads of one process
        # do: a rank's thread at the speed of one of them (validate()'s `busy`).
        tp = t1_s * share / busy + gathers + extra
        # The pipeline: validate()'s, a prompt's pieces overlapping (pipeline_pass_s), each
        # piece's residual and the logits over the link.
        compute, pieces = pipeline_pass_s(tokens, one["t1"][test], m["pp2_stage_layers"])
        hop = (pieces + 1) * (link.latency_us * 1e-6) + \
            (tokens * m["hidden"] * 4 + m["vocab"] * 4) / link.bytes_per_s
        pp = compute + hop
        out[test] = {"tp2": tokens / tp, "pp2": tokens / pp}
    return out


def measure(rates: list[int], machine: str) -> dict:
    results = {"machine": machine, "links": []}
    with two_hosts(None):
        unlimited = collectives()
    results["veth_small_message_us"] = min(c["send_us"] for c in unlimited)  # one way
    results["veth_collectives"] = unlimited
    for rate in rates:
        with two_hosts(rate):
            coll = collectives()
            row = {"rate_mbit": rate, "collectives": coll,
                   "tp2": bench(["--tp", "2"]), "pp2": bench(["--pp", "2"])}
        large = max(coll, key=lambda c: c["bytes"])
        # An all-gather of B bytes over 2 ranks receives B/2 per rank.
        row["all_gather_mb_per_s"] = round(large["bytes"] / 2 / large["all_gather_us"], 1)
        results["links"].append(row)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,200", help="link rates in Mbit/s")
    parser.add_argument("--measured", default=str(ROOT / "bench/dist/measured_spr.json"),
                        help="one-process measurements of this machine (measure_validation.py)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--report", help="print the table of an earlier --json run (no root)")
    args = parser.parse_args()
    if os.geteuid() != 0 and not args.report:
        print("needs root (network namespaces and tc)", file=sys.stderr)
        return 2
    measured = json.loads(Path(args.measured).read_text())
    if args.report:
        results = json.loads(Path(args.report).read_text())
    else:
        results = measure([int(r) for r in args.rates.split(",")], measured["machine"])
    latency_us = results["veth_small_message_us"]
    for row in results["links"]:
        # The link as the ranks get it: one small message's latency over veth, and the rate
        # a large all-gather reaches (tbf's timer keeps it below the nominal rate at 1 Gbit/s).
        link = Link(f"{row['rate_mbit']} Mbit/s", row["all_gather_mb_per_s"] * 8 / 1000,
                    latency_us)
        row["predicted"] = predict(measured, link)
    print(f"{measured['machine']}; veth + TCP small message one way: {latency_us:.1f} us")
    print("| link | all-gather of 4 MiB (MB/s per rank) | test | TP=2 predicted | TP=2 measured "
          "| PP=2 predicted | PP=2 measured |")
    print("|---|---|---|---|---|---|---|")
    for row in results["links"]:
        for test in ("pp512", "tg128"):
            p = row["predicted"][test]
            tp, pp = row["tp2"][test], row["pp2"][test]
            print(f"| {row['rate_mbit']} Mbit/s | {row['all_gather_mb_per_s']} | {test} | "
                  f"{p['tp2']:.1f} | {tp:.1f} ({tp / p['tp2'] - 1:+.0%}) | {p['pp2']:.1f} | "
                  f"{pp:.1f} ({pp / p['pp2'] - 1:+.0%}) |")
    if args.json and not args.report:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
