#!/usr/bin/env python3
"""The scale model of docs/scale-out.md: per layer and per token, the bytes each collective
moves and the weights each rank reads, turned into decode tokens/s and time to first token for
a split of a model over ranks and links.

    bench/scale_model.py kimi             # the Kimi-K2 tables of docs/scale-out.md
    bench/scale_model.py validate FILE    # predicted vs measured here (FILE: measurements as
                                          # bench/dist/measured_zen3.json holds them)

Decode of one sequence is memory- and latency-bound: a token's time is the sum over layers of
the slowest rank's weight reads (bytes / memory bandwidth) plus each collective's time; a
collective over N ranks costs log2(N) latencies (recursive doubling) plus its bytes over the
link. A prompt is compute-bound: 2 FLOPs per active parameter per token, split over the ranks,
plus the collectives' bytes for all its tokens. Pipeline stages add one hop of the residual
stream each. Every number is an input stated below; nothing here is fitted to tachyon.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass


@dataclass
class Shape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int          # query/value width per head (MLA: v_head_dim)
    ffn: int               # dense FFN width
    vocab: int
    attention_params: float  # per layer
    experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    shared_ffn: int = 0
    dense_layers: int = 0  # leading layers with a dense FFN
    bytes_per_param: float = 0.5625  # Q4_K-class weights (4.5 bits)


# Kimi-K2 (config.json of moonshotai/Kimi-K2-Instruct): DeepSeek-V3's architecture with 384
# routed experts and 64 heads. MLA per layer: q_a 7168x1536, q_b 1536x(64x192), kv_a 7168x576,
# kv_b 512x(64x256), o (64x128)x7168.
KIMI_K2 = Shape("Kimi-K2", layers=61, hidden=7168, heads=64, kv_heads=64, head_dim=128,
                ffn=18432, vocab=163840,
                attention_params=7168 * 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 * 64 * 256
                + 64 * 128 * 7168,
                experts=384, experts_per_token=8, expert_ffn=2048, shared_ffn=2048,
                dense_layers=1)


@dataclass
class Node:
    name: str
    memory_gbs: float   # effective weight-streaming bandwidth per rank, GB/s
    flops: float        # effective dense FLOP/s per rank on prompts


@dataclass
class Link:
    name: str
    gbits: float
    latency_us: float   # one message, end to end

    @property
    def bytes_per_s(self) -> float:
        return self.gbits / 8 * 1e9


# Stated assumptions (per rank = per node for CPUs, per GPU for GPUs).
CPU_NODE = Node("CPU node (2-socket DDR5, AVX-512 VNNI/AMX)", memory_gbs=350, flops=4e12)
# A GPU node as one rank: 8 H200s splitting each layer over NVLink (900 GB/s, whose time is
# left out next to the links between nodes), ~75% of HBM bandwidth and ~40% of peak FLOPs.
GPU = Node("GPU node (8x H200, NVLink inside)", memory_gbs=8 * 3600, flops=8 * 400e12)
LINKS = [Link("25 Gb/s Ethernet (TCP)", 25, 25.0), Link("100 Gb/s (RoCE)", 100, 5.0),
         Link("400 Gb/s (InfiniBand NDR)", 400, 2.0)]


def collective_s(ranks: int, total_bytes: float, link: Link) -> float:
    """An all-gather (or all-reduce) of `total_bytes` over `ranks` ranks: log2(N) message
    latencies plus the (N-1)/N of the bytes each rank must receive."""
    if ranks <= 1:
        return 0.0
    return math.log2(ranks) * link.latency_us * 1e-6 + \
        (ranks - 1) / ranks * total_bytes / link.bytes_per_s


def all_to_all_s(ranks: int, received_bytes: float, link: Link) -> float:
    """An all-to-all in which each rank receives `received_bytes` from the others: log2(N)
    message latencies (as for the collectives above) plus those bytes."""
    if ranks <= 1:
        return 0.0
    return math.log2(ranks) * link.latency_us * 1e-6 + received_bytes / link.bytes_per_s


# An 8-bit block of 256 values as the K-quant products read it (int8 values, an f32 scale, an
# int16 sum per 16): what TP ranks exchange for the products after attention on Q4_K weights.
Q8_K_BYTES_PER_VALUE = 1 + 4 / 256 + 2 / 16

# tachyon's --expert-exchange auto: the all-to-all when it saves each rank this many bytes.
ALL_TO_ALL_MIN_SAVED_BYTES = 256 * 1024


def built_expert_exchange_s(ranks: int, tokens: int, link: Link) -> float:
    """The expert exchange as tachyon makes it (f32, exact; --expert-exchange auto): every
    pair's row all-gathered, or, when that saves each rank ALL_TO_ALL_MIN_SAVED_BYTES, each row
    to the rank that sums its token (about 1/N of the pairs' rows reach each rank, (N-1)/N of
    them from others), then the token sums all-gathered."""
    s = KIMI_K2
    pair_bytes = tokens * s.experts_per_token * s.hidden * 4
    token_bytes = tokens * s.hidden * 4
    gathered = pair_bytes * (ranks - 1) / ranks
    exchanged = gathered / ranks + token_bytes * (ranks - 1) / ranks
    if gathered - exchanged < ALL_TO_ALL_MIN_SAVED_BYTES:
        return collective_s(ranks, pair_bytes, link)
    return all_to_all_s(ranks, gathered / ranks, link) + collective_s(ranks, token_bytes, link)


def kimi_decode(nodes: int, node: Node, link: Link, tokens: int = 1, built: bool = False) -> dict:
    """Kimi-K2 over `nodes` ranks: attention and shared expert split by heads/rows (TP), routed
    experts split by expert (EP, each token's rows sent to the ranks of its 8 experts and the
    results combined: all-to-all), `tokens` sequences decoding together, bf16 on the wire.
    `built`: the exchanges as tachyon makes them today (every rank has every token; the heads'
    outputs as 8-bit blocks where each rank's heads fill whole 256-value blocks, else f32; the
    other rows f32; the experts' rows exchanged by built_expert_exchange_s and summed in id
    order: exact)."""
    s = KIMI_K2
    b = s.bytes_per_param
    per_layer_s = 0.0
    comm_s = 0.0
    for layer in range(s.layers):
        moe = layer >= s.dense_layers
        attention = s.attention_params * b / nodes
        if moe:
            expert_bytes = 3 * s.hidden * s.expert_ffn * b
            # Distinct experts the batch touches, spread over the ranks; the slowest rank reads
            # about ceil(distinct / nodes) of them.
            distinct = s.experts * (1 - (1 - s.experts_per_token / s.experts) ** tokens)
            routed = math.ceil(distinct / nodes) * expert_bytes
            shared = 3 * s.hidden * s.shared_ffn * b / nodes
            ffn = routed + shared
        else:
            ffn = 3 * s.hidden * s.ffn * b / nodes
        per_layer_s += (attention + ffn) / (node.memory_gbs * 1e9)
        # Attention: gather the heads' outputs and the projection's rows.
        wire = 4 if built else 2
        heads_wire = 2
        if built:
            rank_width = s.heads // nodes * s.head_dim
            heads_wire = Q8_K_BYTES_PER_VALUE if rank_width % 256 == 0 else 4
        comm_s += collective_s(nodes, tokens * s.heads * s.head_dim * heads_wire, link)
        comm_s += collective_s(nodes, tokens * s.hidden * wire, link)
        if moe and built:
            comm_s += built_expert_exchange_s(nodes, tokens, link)
        elif moe:  # dispatch (fp8) and combine (bf16) of each token's 8 expert rows
            comm_s += collective_s(nodes, tokens * s.experts_per_token * s.hidden * 1, link)
            comm_s += collective_s(nodes, tokens * s.experts_per_token * s.hidden * 2, link)
        else:
            comm_s += 2 * collective_s(nodes, tokens * s.hidden * wire, link)
    output = s.vocab * s.hidden * b / nodes / (node.memory_gbs * 1e9)
    step = per_layer_s + output + comm_s
    return {"step_ms": step * 1e3, "compute_ms": (per_layer_s + output) * 1e3,
            "comm_ms": comm_s * 1e3, "tokens_per_s": tokens / step}


def kimi_ttft(nodes: int, node: Node, link: Link, prompt: int = 4096) -> float:
    """Seconds to compute a `prompt`-token prompt: FLOPs over the ranks plus the collectives
    of every token (attention all-gathers, expert dispatch/combine)."""
    s = KIMI_K2
    active = s.layers * s.attention_params + s.dense_layers * 3 * s.hidden * s.ffn + \
        (s.layers - s.dense_layers) * 3 * s.hidden * (s.experts_per_token * s.expert_ffn + s.shared_ffn) + \
        s.vocab * s.hidden
    compute = 2 * active * prompt / (nodes * node.flops)
    comm = 0.0
    for layer in range(s.layers):
        comm += collective_s(nodes, prompt * (s.heads * s.head_dim + s.hidden) * 2, link)
        comm += collective_s(nodes, prompt * s.experts_per_token * s.hidden * 3, link)
    return compute + comm


def kimi_tables() -> None:
    total = (KIMI_K2.layers * KIMI_K2.attention_params
             + (KIMI_K2.layers - 1) * 3 * KIMI_K2.hidden * (KIMI_K2.experts * KIMI_K2.expert_ffn
                                                             + KIMI_K2.shared_ffn)
             + 3 * KIMI_K2.hidden * KIMI_K2.ffn + 2 * KIMI_K2.vocab * KIMI_K2.hidden)
    print(f"Kimi-K2: {total / 1e9:.0f}B parameters, {total * KIMI_K2.bytes_per_param / 1e9:.0f} GB "
          f"at {KIMI_K2.bytes_per_param * 8:.1f} bits")
    for node, counts in ((CPU_NODE, (8, 16, 64)), (GPU, (8, 16, 64))):
        print(f"\n{node.name}: {node.memory_gbs:.0f} GB/s, {node.flops / 1e12:.0f} TFLOP/s per rank")
        print("| ranks | link | weights per rank (GB) | decode 1 seq (tokens/s) | compute / comm "
              "per token (ms) | decode 64 seqs (tokens/s) | as built today: 1 / 64 seqs | "
              "TTFT 4K prompt (s) |")
        print("|---|---|---|---|---|---|---|---|")
        for n in counts:
            for link in LINKS:
                one = kimi_decode(n, node, link, 1)
                many = kimi_decode(n, node, link, 64)
                built_one = kimi_decode(n, node, link, 1, built=True)
                built_many = kimi_decode(n, node, link, 64, built=True)
                print(f"| {n} | {link.name} | {total * KIMI_K2.bytes_per_param / n / 1e9:.0f} | "
                      f"{one['tokens_per_s']:.1f} | {one['compute_ms']:.1f} / "
                      f"{one['comm_ms']:.1f} | {many['tokens_per_s']:.0f} | "
                      f"{built_one['tokens_per_s']:.1f} / {built_many['tokens_per_s']:.0f} | "
                      f"{kimi_ttft(n, node, link):.2f} |")


def interpolate_us(collectives: list[dict], ranks: int, key: str, size: float) -> float:
    """A collective's measured time for `size` bytes (log-log between the measured sizes)."""
    points = sorted((c["bytes"], c[key]) for c in collectives if c["ranks"] == ranks)
    if size <= points[0][0]:
        return points[0][1]
    for (b0, t0), (b1, t1) in zip(points, points[1:]):
        if size <= b1:
            f = math.log(size / b0) / math.log(b1 / b0)
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    (b0, t0), (b1, t1) = points[-2], points[-1]
    return t1 * size / b1


def tp_gathers(m: dict) -> list[tuple[int, float]]:
    """A TP layer's four all-gathers as (values per token, bytes per value): the attention
    heads' output and the FFN's activations as the products after them read them (8-bit blocks
    on quantized weights: `tp_input_bytes_per_value`; f32 in files measured before that), the
    hidden rows as f32."""
    quantized = m.get("tp_input_bytes_per_value", 4)
    return [(m["q_size"], quantized), (m["hidden"], 4), (m["ffn"], quantized), (m["hidden"], 4)]


def validate(path: str) -> None:
    """Predicted vs measured for the default model on this machine (`path`: bench/dist/
    measured_*.json). Inputs are one-process measurements only: the step time of one thread
    (t1) for a rank's weights, scaled by how much slower a thread runs when both cores are busy
    (t2 vs t1: the cores share the memory bus and caches), plus the collectives' measured
    times for the bytes each step moves."""
    data = json.load(open(path))
    m = data["model"]
    one = data["one_process"]
    coll = data["collectives"]
    whole = m["rank_weight_mib"]["whole"]
    rows = []
    for test, tokens in (("tg128", 1), ("pp512", 512)):
        t1_s = tokens / one["t1"][test]           # one thread, the whole model
        busy = one["t2"][test] / (2 * one["t1"][test])  # a thread's speed with both cores busy
        # Tensor parallelism: the larger rank's share of the weights at the busy speed, then per
        # layer four all-gathers (attention heads, hidden, FFN, hidden), the embedding's
        # all-reduce and the logits' gather (the leader's rows: tokens x vocab / 2).
        share = max(m["rank_weight_mib"]["tp2"]) / whole
        gathers = m["layers"] * sum(interpolate_us(coll, 2, "all_gather_us", tokens * n * size)
                                    for n, size in tp_gathers(m))
        extra = interpolate_us(coll, 2, "all_reduce_us", tokens * m["hidden"] * 4) + \
            interpolate_us(coll, 2, "all_gather_us", m["vocab"] * 2)  # one token's logits
        tp = t1_s * share / busy + (gathers + extra) * 1e-6
        # Pipeline, one sequence: each stage alone on the machine (a thread at full speed), a
        # prompt in pieces that overlap (pipeline_pass_s), plus the residual's hops and the
        # logits' trip to the leader.
        compute, pieces = pipeline_pass_s(tokens, one["t1"][test], m["pp2_stage_layers"])
        hop = pieces * interpolate_us(coll, 2, "send_us", tokens / pieces * m["hidden"] * 4) + \
            interpolate_us(coll, 2, "send_us", m["vocab"] * 4)
        pp = compute + hop * 1e-6
        rows.append((test, tokens / tp, data["measured"]["tp2"][test], tokens / pp,
                     data["measured"]["pp2"][test], one["t2"][test]))
    print(f"{data['machine']}; {m['name']}")
    print("| test | TP=2 predicted | TP=2 measured | PP=2 predicted | PP=2 measured | one process, "
          "2 threads |")
    print("|---|---|---|---|---|---|")
    for test, tp_p, tp_m, pp_p, pp_m, base in rows:
        print(f"| {test} | {tp_p:.0f} | {tp_m:.0f} ({tp_m / tp_p - 1:+.0%}) | {pp_p:.0f} | "
              f"{pp_m:.0f} ({pp_m / pp_p - 1:+.0%}) | {base:.0f} |")
    if "tp2pp2" in data["measured"]:
        validate_four_ranks(data)
    if "serve_ttft" in data:
        hop_us = interpolate_us(coll, 2, "send_us", 64 * m["hidden"] * 4)  # a micro-batch's
        validate_ttft(data["serve_ttft"], one, rows[1][1], m["pp2_stage_layers"], hop_us)


def validate_four_ranks(data: dict) -> None:
    """TP=2 x PP=2 (4 ranks): two pipeline stages (validate()'s stage split), each a TP pair.
    The pass is the pipeline's (pipeline_pass_s) with each stage's pair at TP's speed, but no
    faster than the machine's cores get through every rank's work (`cores` ranks run at once:
    on 2 cores a prompt's overlapping stages share them); plus each layer's four all-gathers
    within its pair, the residual's hops between the stages and the logits' trip to the
    leader."""
    m = data["model"]
    one = data["one_process"]
    coll = data["collectives"]
    cores = data.get("cores", 2)
    print("\nTP=2 x PP=2 (4 ranks, one thread each, on "
          f"{cores} cores; stages of {m['pp2_stage_layers'][0]} and {m['pp2_stage_layers'][1]} "
          "layers)")
    print("| test | predicted | measured | one process, 2 threads |")
    print("|---|---|---|---|")
    for test, tokens in (("tg128", 1), ("pp512", 512)):
        busy = one["t2"][test] / (2 * one["t1"][test])
        pair_rate = 2 * busy * one["t1"][test]  # a TP pair over the whole model
        pipeline, pieces = pipeline_pass_s(tokens, pair_rate, m["pp2_stage_layers"])
        every_rank = tokens / one["t1"][test] / busy / min(cores, 4)
        gathers = m["layers"] * sum(interpolate_us(coll, 2, "all_gather_us", tokens * n * size)
                                    for n, size in tp_gathers(m))
        hops = pieces * interpolate_us(coll, 2, "send_us", tokens / pieces * m["hidden"] * 4) + \
            interpolate_us(coll, 2, "send_us", m["vocab"] * 4)
        predicted = tokens / (max(pipeline, every_rank) + (gathers + hops) * 1e-6)
        measured = data["measured"]["tp2pp2"][test]
        print(f"| {test} | {predicted:.0f} | {measured:.0f} ({measured / predicted - 1:+.0%}) | "
              f"{one['t2'][test]:.0f} |")


def pipeline_pass_s(tokens: int, t1_rate: float, stage_layers: list[int]) -> tuple[float, int]:
    """(seconds, pieces) of a pass of `tokens` through 2 pipeline stages at one thread's rate
    `t1_rate` (tokens/s of the whole model): 128+ tokens go in m pieces (DecoderModel's
    even_token_cuts: up to 2 per stage, at least 64 tokens each), so the pass takes m times the
    slower stage's part of a piece plus the other's (each stage its layers' share)."""
    pieces = min(tokens // 64, 4) if tokens >= 128 else 1
    shares = [n / sum(stage_layers) for n in stage_layers]
    piece_s = tokens / t1_rate / pieces
    return pieces * max(shares) * piece_s + min(shares) * piece_s, pieces


def validate_ttft(ttft: dict, one: dict, tp_rate: float, stage_layers: list[int],
                  hop_us: float) -> None:
    """Time to first token through `serve` (bench/dist/serve_ttft.py): the prompt's compute in
    each layout plus what serving adds on top of the compute in one process (HTTP, the
    scheduler, sampling, the first event: one process's measured TTFT less its prompt at
    `tachyon bench`'s pp512 rate). TP=2: the prompt at TP's predicted rate. PP=2: the prompt
    runs in steps of `max_batch_tokens`; each step's tokens flow through the 2 stages in m
    micro-batches (DecoderModel::micro_batch_cuts: up to 2 per stage, at least 64 tokens each)
    at one thread's speed, each stage taking its layers' share of a micro-batch (the stages are
    split by bytes, the output projection counted: for a prompt, whose logits are one row, the
    first stage has more work), so a step takes m times the slower stage's part plus the other
    stage's one, plus the residual's hops."""
    tokens = ttft["prompt_tokens"]
    step_tokens = ttft.get("max_batch_tokens", 256)
    one_rate, t1_rate = one["t2"]["pp512"], one["t1"]["pp512"]
    serving_ms = ttft["one_t2"]["median_ms"] - tokens / one_rate * 1000
    pp_ms = 0.0
    for first in range(0, tokens, step_tokens):
        step = min(step_tokens, tokens - first)
        compute_s, micro = pipeline_pass_s(step, t1_rate, stage_layers)
        pp_ms += compute_s * 1000 + (micro + 1) * hop_us / 1000
    print(f"\nTTFT through serve, a {tokens}-token prompt (median of {ttft['requests']}; "
          f"serving adds {serving_ms:.0f} ms in one process; PP=2 stages of "
          f"{stage_layers[0]} and {stage_layers[1]} layers)")
    print("| layout | predicted (ms) | measured (ms) |")
    print("|---|---|---|")
    print(f"| one process, 2 threads | {tokens / one_rate * 1000 + serving_ms:.0f} | "
          f"{ttft['one_t2']['median_ms']:.0f} |")
    for name, label, predicted in (("tp2", "TP=2", tokens / tp_rate * 1000 + serving_ms),
                                   ("pp2", "PP=2", pp_ms + serving_ms)):
        measured = ttft[name]["median_ms"]
        print(f"| {label} | {predicted:.0f} | {measured:.0f} ({measured / predicted - 1:+.0%}) |")

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "kimi":
        kimi_tables()
    elif len(sys.argv) >= 3 and sys.argv[1] == "validate":
        validate(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
