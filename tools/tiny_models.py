#!/usr/bin/env python3
"""Tiny random-weight Llama-family models, written as GGUF files the way llama.cpp's converter
writes real ones. tachyon's golden-logits test loads these files and compares its logits with
the ones Hugging Face transformers computed from the same weights
(tools/make_hf_logits_goldens.py, tests/golden/logits/).

Needs only numpy and gguf (the test venv):

    .venv/bin/python tools/tiny_models.py OUT_DIR        # writes every CONFIGS entry, F32 and F16

or, from Python: `write_model(name, "f32" | "f16", path)`.

Weights are made in the Hugging Face layout (`hf_weights`), deterministically from
`numpy.random.default_rng(config.seed)`, and converted to GGUF names and layout here.

Q/K layout -- the one thing that is easy to get wrong:
  * Hugging Face applies RoPE with `rotate_half`: inside each head of size D, dimension j is
    rotated together with dimension j + D/2 ("NeoX" pairing), by angle pos * inv_freq[j].
  * llama.cpp's converter stores the *llama* architecture's attn_q / attn_k weights with the
    rows of each head permuted so that those partners become adjacent: GGUF row 2j holds HF row
    j and GGUF row 2j+1 holds HF row j + D/2 (per head; attn_q uses head_count heads, attn_k
    head_count_kv heads). ggml then uses its "normal" RoPE mode, rotating pairs (2j, 2j+1) by
    pos * inv_freq[j]. `permute_rows_for_gguf` does this (and for a Q/K bias or norm the same
    permutation would apply to the vector; no llama config here has one).
  * qwen2 and qwen3 are stored unpermuted; llama.cpp runs them in NeoX mode (pairs j, j + D/2),
    exactly like Hugging Face.
  Either way q.k is unchanged, so the logits are the same as Hugging Face's.

Dtypes follow llama.cpp: in an F16 file every 2-D weight matrix (token_embd, output, attention
and FFN projections) is F16; norms, biases and rope_freqs stay F32. `general.file_type` is 0
(ALL_F32) or 1 (MOSTLY_F16).
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import gguf.quants
import numpy as np

# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyConfig:
    name: str
    arch: str                       # GGUF architecture: "llama", "qwen2" or "qwen3"
    seed: int
    vocab_size: int
    hidden_size: int = 64
    num_layers: int = 2
    ffn_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = None     # None: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tied_embeddings: bool = False
    context_length: int = 128       # max_position_embeddings
    # Hugging Face-style rope_scaling dict (rope_type: "linear", "llama3" or "yarn") or None.
    rope_scaling: dict | None = field(default=None, hash=False)
    description: str = ""
    # config.json's model_type when it is not the GGUF architecture's usual one (deepseek_v2,
    # deepseek_v3, kimi_k2, mixtral).
    model_type: str | None = None
    # Multi-head Latent Attention (arch deepseek2): q_lora_rank (0: none), kv_lora_rank,
    # qk_nope_head_dim, qk_rope_head_dim, v_head_dim.
    mla: dict | None = field(default=None, hash=False)
    # Experts: num_experts, experts_per_token, expert_ffn, shared_experts, first_dense,
    # n_group, topk_group, routed_scaling_factor, norm_topk_prob (DeepSeek's config names).
    moe: dict | None = field(default=None, hash=False)
    dtypes: tuple = ("f32", "f16")
    # deepseek2 GGUF: llama.cpp's current layout (attn_k_b / attn_v_b, one latent KV head) or
    # the older one (attn_kv_b).
    gguf_split_kv_b: bool = True
    # DeepSeek-V3's multi-token prediction ("NextN") layers after the trunk's num_layers.
    mtp_layers: int = 0
    # Sliding-window attention: the window (None: none). gemma3 interleaves local and global
    # layers (every 6th global, as transformers' and llama.cpp's default pattern); mistral's
    # layers are all local.
    sliding_window: int | None = None
    rope_local_theta: float = 10000.0  # gemma3's local layers' RoPE base

    @property
    def gemma(self) -> bool:
        return self.arch == "gemma3"

    def layer_is_local(self, layer: int) -> bool:
        if self.sliding_window is None:
            return False
        return (layer + 1) % 6 != 0 if self.gemma else True

    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def qkv_bias(self) -> bool:
        return self.arch in ("qwen2", "qwen2moe")

    @property
    def qk_norm(self) -> bool:
        return self.arch in ("qwen3", "qwen3moe", "gemma3")

    @property
    def gguf_rope_layout(self) -> str:
        """'normal' (adjacent pairs, Q/K rows permuted in the file) or 'neox' (pairs j, j+D/2).
        (deepseek2 rotates adjacent pairs too, but its weights are stored unpermuted.)"""
        return "normal" if self.arch == "llama" else "neox"

    @property
    def hf_model_type(self) -> str:
        return self.model_type or {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                                   "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
                                   "gemma3": "gemma3_text"}[self.arch]

    @property
    def deepseek(self) -> bool:
        return self.arch == "deepseek2"

    def has_experts(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.moe.get("first_dense", 0)


CONFIGS: list[TinyConfig] = [
    TinyConfig(
        name="llama_gqa", arch="llama", seed=101, vocab_size=288,
        num_heads=4, num_kv_heads=2, rope_theta=10000.0,
        description="llama, GQA 4 query / 2 KV heads, untied output, no RoPE scaling"),
    TinyConfig(
        name="llama_mqa_tied", arch="llama", seed=102, vocab_size=272, ffn_size=160,
        num_heads=4, num_kv_heads=1, rope_theta=1e6, tied_embeddings=True,
        description="llama, MQA (1 KV head), tied embeddings (no output.weight), theta 1e6"),
    TinyConfig(
        name="llama3_rope", arch="llama", seed=103, vocab_size=300,
        num_heads=4, num_kv_heads=2, rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        description="llama, llama3 RoPE scaling (factor 8, low 1, high 4, original 32) stored "
                    "as rope_freqs.weight"),
    TinyConfig(
        name="llama_linear_rope", arch="llama", seed=104, vocab_size=264, ffn_size=144,
        num_heads=4, num_kv_heads=4, rope_theta=10000.0, rms_eps=1e-4,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        description="llama, plain MHA, linear RoPE scaling (factor 2), rms eps 1e-4"),
    TinyConfig(
        name="qwen2_bias_tied", arch="qwen2", seed=105, vocab_size=320,
        num_heads=4, num_kv_heads=2, rope_theta=1e6, rms_eps=1e-6, tied_embeddings=True,
        description="qwen2, Q/K/V bias, GQA, tied embeddings, NeoX RoPE, theta 1e6"),
    TinyConfig(
        name="qwen2_yarn", arch="qwen2", seed=106, vocab_size=296,
        num_heads=4, num_kv_heads=2, rope_theta=10000.0, rms_eps=1e-6,
        # Hugging Face derives YaRN's attention factor from max_position_embeddings /
        # original_max_position_embeddings, so keep that ratio equal to `factor`.
        context_length=128,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                      "beta_fast": 32.0, "beta_slow": 1.0},
        description="qwen2, Q/K/V bias, YaRN RoPE scaling (factor 4, original 32, beta 32/1)"),
    TinyConfig(
        name="qwen3_qknorm", arch="qwen3", seed=107, vocab_size=312, ffn_size=160,
        num_heads=4, num_kv_heads=2, head_dim=32, rope_theta=1e6, rms_eps=1e-6,
        description="qwen3, per-head Q/K RMSNorm, head_dim 32 != hidden/heads 16, untied"),
]


# Mixture-of-Experts and MLA shapes: f32 only (the goldens check max |delta| <= 1e-4 with an
# f32 cache). Router weights are drawn wider than the rest so that every token's choice is
# clear-cut (make_hf_logits_goldens.py checks the margin).
_MLA = dict(q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16)
CONFIGS += [
    TinyConfig(
        name="deepseek_v3_groups", arch="deepseek2", model_type="deepseek_v3", seed=111,
        vocab_size=280, num_layers=3, ffn_size=96, num_heads=4, num_kv_heads=4, dtypes=("f32",),
        mla=_MLA, mtp_layers=1,
        moe=dict(num_experts=8, experts_per_token=2, expert_ffn=32, shared_experts=1,
                 first_dense=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                 norm_topk_prob=True),
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                      "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        description="DeepSeek-V3 shape: MLA with q_lora, sigmoid router with selection bias, "
                    "4 expert groups of which 2 are used, 1 shared expert, 1 dense lead layer, "
                    "YaRN with mscale = mscale_all_dim = 1, 1 multi-token prediction layer"),
    TinyConfig(
        name="deepseek_v2_lite", arch="deepseek2", model_type="deepseek_v2", seed=130,
        vocab_size=264, num_layers=3, ffn_size=96, num_heads=4, num_kv_heads=4, dtypes=("f32",),
        mla={**_MLA, "q_lora_rank": 0}, gguf_split_kv_b=False,
        moe=dict(num_experts=8, experts_per_token=2, expert_ffn=32, shared_experts=2,
                 first_dense=1, routed_scaling_factor=1.0, norm_topk_prob=False),
        description="DeepSeek-V2-Lite shape: MLA without q_lora, softmax router, greedy top-2, "
                    "2 shared experts, 1 dense lead layer; GGUF with llama.cpp's older attn_kv_b"),
    TinyConfig(
        name="kimi_k2_tiny", arch="deepseek2", model_type="kimi_k2", seed=113,
        vocab_size=272, num_layers=3, ffn_size=96, num_heads=4, num_kv_heads=4, dtypes=("f32",),
        rope_theta=50000.0, mla=_MLA, context_length=512,
        moe=dict(num_experts=16, experts_per_token=4, expert_ffn=16, shared_experts=1,
                 first_dense=1, n_group=1, topk_group=1, routed_scaling_factor=2.827,
                 norm_topk_prob=True),
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 16,
                      "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        description="Kimi-K2 shape scaled down: 1 dense lead layer, 1 shared expert, sigmoid + "
                    "bias, n_group 1, routed scale 2.827, 16 experts top-4, YaRN factor 32"),
    TinyConfig(
        name="moonlight_tiny", arch="deepseek2", model_type="deepseek_v3", seed=114,
        vocab_size=288, num_layers=3, ffn_size=96, num_heads=4, num_kv_heads=4, dtypes=("f32",),
        mla={**_MLA, "q_lora_rank": 0},
        moe=dict(num_experts=8, experts_per_token=3, expert_ffn=24, shared_experts=2,
                 first_dense=1, n_group=1, topk_group=1, routed_scaling_factor=2.446,
                 norm_topk_prob=True),
        description="Moonlight-16B-A3B shape: DeepSeek-V3 routing, no q_lora, 2 shared experts, "
                    "top-3 of 8"),
    TinyConfig(
        name="mixtral_tiny", arch="llama", model_type="mixtral", seed=115, vocab_size=276,
        num_layers=2, ffn_size=64, num_heads=4, num_kv_heads=2, dtypes=("f32",),
        moe=dict(num_experts=4, experts_per_token=2, expert_ffn=64, router_std=2.0),
        description="Mixtral: llama attention (GQA), 4 experts top-2, softmax renormalised"),
    TinyConfig(
        name="qwen3_moe_tiny", arch="qwen3moe", seed=116, vocab_size=292, num_layers=2,
        ffn_size=96, num_heads=4, num_kv_heads=2, head_dim=32, rope_theta=1e6, rms_eps=1e-6,
        dtypes=("f32",),
        moe=dict(num_experts=8, experts_per_token=2, expert_ffn=32, norm_topk_prob=True,
                 router_std=2.0),
        description="Qwen3-MoE: QK-norm attention, 8 experts top-2, norm_topk_prob"),
    TinyConfig(
        name="qwen2_moe_tiny", arch="qwen2moe", seed=117, vocab_size=284, num_layers=2,
        ffn_size=96, num_heads=4, num_kv_heads=2, rope_theta=1e6, rms_eps=1e-6,
        dtypes=("f32",),
        moe=dict(num_experts=8, experts_per_token=2, expert_ffn=32, norm_topk_prob=False,
                 shared_expert_ffn=64, router_std=2.0),
        description="Qwen2-MoE (Qwen1.5-MoE): Q/K/V bias, 8 experts top-2 not renormalised, "
                    "one shared expert behind a sigmoid gate"),
]

# Sliding-window attention: f32 only, windows much shorter than the 64-token prompt.
CONFIGS += [
    TinyConfig(
        name="gemma3_tiny", arch="gemma3", seed=140, vocab_size=304, num_layers=7,
        ffn_size=160, num_heads=4, num_kv_heads=2, head_dim=32, rope_theta=1e6, rms_eps=1e-6,
        tied_embeddings=True, sliding_window=12, dtypes=("f32",),
        description="Gemma 3: 5 local layers (window 12, RoPE base 1e4), a global one (base "
                    "1e6), then a local one; QK-norm, pre and post norms, GeGLU, embeddings "
                    "times sqrt(hidden), head_dim 32 != hidden/heads, tied"),
    TinyConfig(
        name="gemma3_mqa_linear", arch="gemma3", seed=141, vocab_size=288, num_layers=6,
        ffn_size=96, num_heads=4, num_kv_heads=1, head_dim=16, rope_theta=1e6, rms_eps=1e-6,
        tied_embeddings=True, sliding_window=5, dtypes=("f32",),
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        description="Gemma 3 (4B+ shape): one KV head, linear RoPE scaling (factor 8) on the "
                    "global layer only, window 5"),
    TinyConfig(
        name="mistral_window", arch="llama", model_type="mistral", seed=142, vocab_size=276,
        num_layers=2, num_heads=4, num_kv_heads=2, sliding_window=9, dtypes=("f32",),
        description="Mistral 7B v0.1 shape: every layer attends to a sliding window of 9 "
                    "(llama.attention.sliding_window in the GGUF)"),
]

# For the K-quant quantizer test (tests/golden/quantizers_k): rows of 256 values, no goldens
# of its own.
K_QUANT_CONFIG = TinyConfig(
    name="llama_k_quant", arch="llama", seed=120, vocab_size=264, hidden_size=256, num_layers=1,
    ffn_size=512, num_heads=4, num_kv_heads=2, dtypes=("f32",),
    description="llama with 256-wide rows, for --quantize q4_k / q6_k against llama.cpp")

CONFIGS_BY_NAME = {config.name: config for config in CONFIGS + [K_QUANT_CONFIG]}
DTYPES = ("f32", "f16")
NUM_INPUT_TOKENS = 64


def get_config(name: str) -> TinyConfig:
    if name not in CONFIGS_BY_NAME:
        raise KeyError(f"unknown tiny model '{name}'; known: {', '.join(CONFIGS_BY_NAME)}")
    return CONFIGS_BY_NAME[name]


def gguf_file_name(name: str, dtype: str) -> str:
    return f"{name}.{dtype}.gguf"


def input_token_ids(config: TinyConfig) -> list[int]:
    """The fixed 64-token prompt the goldens are computed on (ids in [0, vocab))."""
    rng = np.random.default_rng(9000 + config.seed)
    return [int(t) for t in rng.integers(0, config.vocab_size, NUM_INPUT_TOKENS)]


# --------------------------------------------------------------------------------------------
# Weights (Hugging Face names and layout: Linear weights are [out_features, in_features])
# --------------------------------------------------------------------------------------------

# Standard deviations: big enough that attention is not uniform and logits are O(1-10).
EMBEDDING_STD = 0.3
OUTPUT_STD = 0.3
QK_STD = 0.15
OTHER_STD = 0.1
BIAS_STD = 0.1
NORM_NOISE = 0.1


def hf_weights(config: TinyConfig, dtype: str = "f32") -> dict[str, np.ndarray]:
    """All weights, keyed by Hugging Face parameter name, as float32 arrays. For dtype "f16" the
    2-D matrices are rounded to float16 and back: exactly the values an F16 GGUF holds."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype '{dtype}', expected one of {DTYPES}")
    weights = _random_hf_weights(config)
    if dtype == "f16":
        weights = {name: _round_f16(array) if array.ndim == 2 else array
                   for name, array in weights.items()}
    return weights


def _round_f16(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float16).astype(np.float32)


def _random_hf_weights(config: TinyConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(config.seed)

    def normal(std: float, *shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(size: int) -> np.ndarray:
        return (1.0 + rng.standard_normal(size) * NORM_NOISE).astype(np.float32)

    if config.gemma:
        # Gemma's norms multiply by (1 + weight): their weights sit around 0.
        def norm(size: int) -> np.ndarray:  # noqa: F811
            return (rng.standard_normal(size) * NORM_NOISE).astype(np.float32)

    w: dict[str, np.ndarray] = {}
    w["model.embed_tokens.weight"] = normal(EMBEDDING_STD, config.vocab_size, config.hidden_size)
    return _random_layers(config, w, normal, norm)


ROUTER_STD = 0.5
SELECTION_BIAS_STD = 0.05


def _random_layers(config: TinyConfig, w: dict, normal, norm) -> dict[str, np.ndarray]:
    """The layers, final norm and output matrix (and any MTP layers) in the released
    checkpoints' layout: one tensor per expert (mlp.experts.E.gate_proj, Mixtral's
    block_sparse_moe.experts.E.w1/w3/w2). The dense models draw in the same order as before
    MoE existed, so their files keep their bytes."""
    hidden, ffn, head = config.hidden_size, config.ffn_size, config.head_size
    for layer in range(config.num_layers):
        _random_decoder_layer(config, layer, w, normal, norm)
    w["model.norm.weight"] = norm(hidden)
    if not config.tied_embeddings:
        w["lm_head.weight"] = normal(OUTPUT_STD, config.vocab_size, hidden)
    for layer in range(config.num_layers, config.num_layers + config.mtp_layers):
        # DeepSeek-V3's checkpoint layout for its NextN layer: a decoder layer plus these.
        p = f"model.layers.{layer}."
        _random_decoder_layer(config, layer, w, normal, norm)
        w[p + "eh_proj.weight"] = normal(OTHER_STD, hidden, 2 * hidden)
        w[p + "enorm.weight"] = norm(hidden)
        w[p + "hnorm.weight"] = norm(hidden)
        w[p + "embed_tokens.weight"] = normal(EMBEDDING_STD, config.vocab_size, hidden)
        w[p + "shared_head.norm.weight"] = norm(hidden)
        w[p + "shared_head.head.weight"] = normal(OUTPUT_STD, config.vocab_size, hidden)
    return w


def _random_decoder_layer(config: TinyConfig, layer: int, w: dict, normal, norm) -> None:
    hidden, ffn, head = config.hidden_size, config.ffn_size, config.head_size
    p = f"model.layers.{layer}."
    w[p + "input_layernorm.weight"] = norm(hidden)
    if config.mla is not None:
        m = config.mla
        qk_head = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        if m["q_lora_rank"]:
            w[p + "self_attn.q_a_proj.weight"] = normal(QK_STD, m["q_lora_rank"], hidden)
            w[p + "self_attn.q_a_layernorm.weight"] = norm(m["q_lora_rank"])
            w[p + "self_attn.q_b_proj.weight"] = normal(QK_STD, config.num_heads * qk_head,
                                                        m["q_lora_rank"])
        else:
            w[p + "self_attn.q_proj.weight"] = normal(QK_STD, config.num_heads * qk_head, hidden)
        w[p + "self_attn.kv_a_proj_with_mqa.weight"] = normal(
            QK_STD, m["kv_lora_rank"] + m["qk_rope_head_dim"], hidden)
        w[p + "self_attn.kv_a_layernorm.weight"] = norm(m["kv_lora_rank"])
        w[p + "self_attn.kv_b_proj.weight"] = normal(
            QK_STD, config.num_heads * (m["qk_nope_head_dim"] + m["v_head_dim"]),
            m["kv_lora_rank"])
        w[p + "self_attn.o_proj.weight"] = normal(OTHER_STD, hidden,
                                                  config.num_heads * m["v_head_dim"])
    else:
        q_size, kv_size = config.num_heads * head, config.num_kv_heads * head
        w[p + "self_attn.q_proj.weight"] = normal(QK_STD, q_size, hidden)
        w[p + "self_attn.k_proj.weight"] = normal(QK_STD, kv_size, hidden)
        w[p + "self_attn.v_proj.weight"] = normal(OTHER_STD, kv_size, hidden)
        if config.qkv_bias:
            w[p + "self_attn.q_proj.bias"] = normal(BIAS_STD, q_size)
            w[p + "self_attn.k_proj.bias"] = normal(BIAS_STD, kv_size)
            w[p + "self_attn.v_proj.bias"] = normal(BIAS_STD, kv_size)
        if config.qk_norm:
            w[p + "self_attn.q_norm.weight"] = norm(head)
            w[p + "self_attn.k_norm.weight"] = norm(head)
        w[p + "self_attn.o_proj.weight"] = normal(OTHER_STD, hidden, q_size)
    w[p + "post_attention_layernorm.weight"] = norm(hidden)
    if config.gemma:
        w[p + "pre_feedforward_layernorm.weight"] = norm(hidden)
        w[p + "post_feedforward_layernorm.weight"] = norm(hidden)
    if not config.has_experts(layer):
        w[p + "mlp.gate_proj.weight"] = normal(OTHER_STD, ffn, hidden)
        w[p + "mlp.up_proj.weight"] = normal(OTHER_STD, ffn, hidden)
        w[p + "mlp.down_proj.weight"] = normal(OTHER_STD, hidden, ffn)
        return
    moe = config.moe
    experts, expert_ffn = moe["num_experts"], moe["expert_ffn"]
    mixtral = config.hf_model_type == "mixtral"
    block = p + ("block_sparse_moe." if mixtral else "mlp.")
    w[block + "gate.weight"] = normal(moe.get("router_std", ROUTER_STD), experts, hidden)
    if config.hf_model_type in ("deepseek_v3", "kimi_k2"):
        w[block + "gate.e_score_correction_bias"] = normal(SELECTION_BIAS_STD, experts)
    for e in range(experts):
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        w[f"{block}experts.{e}.{names[0]}.weight"] = normal(OTHER_STD, expert_ffn, hidden)
        w[f"{block}experts.{e}.{names[1]}.weight"] = normal(OTHER_STD, expert_ffn, hidden)
        w[f"{block}experts.{e}.{names[2]}.weight"] = normal(OTHER_STD, hidden, expert_ffn)
    if moe.get("shared_experts"):
        shared = moe["shared_experts"] * expert_ffn
        w[block + "shared_experts.gate_proj.weight"] = normal(OTHER_STD, shared, hidden)
        w[block + "shared_experts.up_proj.weight"] = normal(OTHER_STD, shared, hidden)
        w[block + "shared_experts.down_proj.weight"] = normal(OTHER_STD, hidden, shared)
    if moe.get("shared_expert_ffn"):  # Qwen2-MoE: one shared expert and its gate
        shared = moe["shared_expert_ffn"]
        w[block + "shared_expert.gate_proj.weight"] = normal(OTHER_STD, shared, hidden)
        w[block + "shared_expert.up_proj.weight"] = normal(OTHER_STD, shared, hidden)
        w[block + "shared_expert.down_proj.weight"] = normal(OTHER_STD, hidden, shared)
        w[block + "shared_expert_gate.weight"] = normal(ROUTER_STD, 1, hidden)


# --------------------------------------------------------------------------------------------
# Hugging Face -> GGUF
# --------------------------------------------------------------------------------------------

_LAYER_TENSOR_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_a_proj.weight": "attn_q_a.weight",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
    "self_attn.kv_b_proj.weight": "attn_kv_b.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "eh_proj.weight": "nextn.eh_proj.weight",
    "enorm.weight": "nextn.enorm.weight",
    "hnorm.weight": "nextn.hnorm.weight",
    "embed_tokens.weight": "nextn.embed_tokens.weight",
    "shared_head.norm.weight": "nextn.shared_head_norm.weight",
    "shared_head.head.weight": "nextn.shared_head_head.weight",
}
# Per-expert tensors (<block>.experts.E.<name>) stack into one GGUF tensor per layer.
_EXPERT_TENSOR_NAMES = {"gate_proj": "ffn_gate_exps.weight", "w1": "ffn_gate_exps.weight",
                        "up_proj": "ffn_up_exps.weight", "w3": "ffn_up_exps.weight",
                        "down_proj": "ffn_down_exps.weight", "w2": "ffn_down_exps.weight"}
_GLOBAL_TENSOR_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


# Gemma's four norms per layer (llama.cpp's names for gemma2/gemma3).
_GEMMA_LAYER_TENSOR_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def gguf_tensor_name(hf_name: str, gemma: bool = False) -> str:
    parts = hf_name.split(".", 3)
    if gemma and len(parts) == 4 and parts[3] in _GEMMA_LAYER_TENSOR_NAMES:
        return f"blk.{parts[2]}.{_GEMMA_LAYER_TENSOR_NAMES[parts[3]]}"
    if hf_name in _GLOBAL_TENSOR_NAMES:
        return _GLOBAL_TENSOR_NAMES[hf_name]
    parts = hf_name.split(".", 3)  # model, layers, N, rest
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _LAYER_TENSOR_NAMES:
        return f"blk.{parts[2]}.{_LAYER_TENSOR_NAMES[parts[3]]}"
    raise KeyError(f"no GGUF name for Hugging Face tensor '{hf_name}'")


def permute_rows_for_gguf(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """HF Q/K rows -> llama.cpp 'normal' RoPE order. Inside each head of D rows, the HF order is
    [0, 1, ..., D/2-1 | D/2, ..., D-1]; the GGUF order interleaves the halves:
    [0, D/2, 1, D/2+1, ...], so GGUF row 2j = HF row j and GGUF row 2j+1 = HF row j + D/2."""
    rows = weight.shape[0]
    head = rows // num_heads
    split = weight.reshape(num_heads, 2, head // 2, *weight.shape[1:])  # [head, half, j, ...]
    return split.swapaxes(1, 2).reshape(weight.shape)                   # [head, j, half, ...]


def unpermute_rows_from_gguf(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of permute_rows_for_gguf."""
    rows = weight.shape[0]
    head = rows // num_heads
    split = weight.reshape(num_heads, head // 2, 2, *weight.shape[1:])  # [head, j, half, ...]
    return split.swapaxes(1, 2).reshape(weight.shape)                   # [head, half, j, ...]


def _expert_parts(hf_name: str) -> tuple[int, int, str] | None:
    """(layer, expert, GGUF stacked name) of a per-expert tensor, else None."""
    parts = hf_name.split(".")
    if "experts" in parts and parts[-1] == "weight" and parts[-3].isdigit():
        return int(parts[2]), int(parts[-3]), _EXPERT_TENSOR_NAMES[parts[-2]]
    return None


def gguf_tensors(config: TinyConfig, dtype: str) -> dict[str, np.ndarray]:
    """GGUF name -> array as stored (F16 or F32), in llama.cpp's layout. Arrays keep the numpy
    [rows, cols] = [out, in] shape; GGUF lists dimensions innermost first, so the file says
    [in, out] (e.g. token_embd is [hidden, vocab]). Experts stack as [experts, rows, cols]
    (GGUF [cols, rows, experts]); deepseek2's kv_b splits per head into attn_k_b [heads,
    kv_lora, nope] (W_UK transposed) and attn_v_b [heads, v, kv_lora] as llama.cpp's converter
    does, unless the config asks for the older attn_kv_b."""
    out: dict[str, np.ndarray] = {}
    stacks: dict[str, dict[int, np.ndarray]] = {}
    for hf_name, array in hf_weights(config, "f32").items():
        expert = _expert_parts(hf_name)
        if expert is not None:
            layer, index, stacked = expert
            stacks.setdefault(f"blk.{layer}.{stacked}", {})[index] = array
            continue
        if hf_name.endswith("kv_b_proj.weight") and config.gguf_split_kv_b:
            m, heads = config.mla, config.num_heads
            per_head = array.reshape(heads, m["qk_nope_head_dim"] + m["v_head_dim"],
                                     m["kv_lora_rank"])
            prefix = gguf_tensor_name(hf_name).removesuffix("attn_kv_b.weight")
            for name, part in ((prefix + "attn_k_b.weight",
                                per_head[:, :m["qk_nope_head_dim"], :].transpose(0, 2, 1)),
                               (prefix + "attn_v_b.weight", per_head[:, m["qk_nope_head_dim"]:, :])):
                out[name] = _stored(np.ascontiguousarray(part), dtype, name)
            continue
        name = gguf_tensor_name(hf_name, config.gemma)
        if config.gemma and name.endswith("norm.weight"):
            # llama.cpp's converter stores Gemma's norms as 1 + weight (what they multiply by).
            array = array + np.float32(1.0)
        if config.gguf_rope_layout == "normal":
            if name.endswith(("attn_q.weight", "attn_q.bias")):
                array = permute_rows_for_gguf(array, config.num_heads)
            elif name.endswith(("attn_k.weight", "attn_k.bias")):
                array = permute_rows_for_gguf(array, config.num_kv_heads)
        out[name] = _stored(array, dtype, name)
    for name, experts in stacks.items():
        out[name] = _stored(np.stack([experts[e] for e in range(len(experts))]), dtype, name)
    freqs = rope_freqs_factors(config)
    if freqs is not None:
        out["rope_freqs.weight"] = freqs
    return out


def _stored(array: np.ndarray, dtype: str, name: str = "") -> np.ndarray:
    """A weight as the GGUF file stores it: matrices (and stacks of them) in F16 or Q8_0 (the
    gguf package's quantizer) when asked, vectors always F32. As llama.cpp's quantizer does, Q8_0
    files keep the router (ffn_gate_inp) and rows that are no whole number of blocks in F32."""
    if dtype == "f16" and array.ndim >= 2:
        array = array.astype(np.float16)
    elif (dtype == "q8_0" and array.ndim >= 2 and array.shape[-1] % 32 == 0
          and not name.endswith("ffn_gate_inp.weight")):
        array = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
    return np.ascontiguousarray(array)


def rope_freqs_factors(config: TinyConfig) -> np.ndarray | None:
    """llama3 RoPE scaling as llama.cpp's converter stores it: one f32 per rotated pair j (D/2
    values) that divides the frequency: inv_freq'[j] = inv_freq[j] / factors[j], where
    inv_freq[j] = theta^(-2j/D). The factor is 1 for wavelengths shorter than
    original/high_freq_factor, `factor` for wavelengths longer than original/low_freq_factor,
    and 1 / ((1 - s)/factor + s) in between, s = (original/wavelen - low) / (high - low)."""
    scaling = config.rope_scaling
    if not scaling or scaling["rope_type"] != "llama3":
        return None
    dim = config.head_size
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factors = []
    for freq in inv_freq:
        wavelen = 2.0 * math.pi / freq
        if wavelen < original / high:
            factors.append(1.0)
        elif wavelen > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


# --------------------------------------------------------------------------------------------
# Tokenizer: a byte-level BPE ("gpt2") vocabulary of exactly vocab_size tokens
# --------------------------------------------------------------------------------------------

BOS_TEXT = "<|bos|>"
EOS_TEXT = "<|eos|>"
_MERGE_WORDS = [" the", " and", " of", " to", " in", " is", "ing", "er", "on", " that", " it",
                 " for", " with", " as", " was", " he", " be", " at", " by", " this", " have",
                 " from", " or", " one", " had", " not", " but", " what", " all", " were",
                 " when", " we", " there", " can", " an", " your", " which", " their", " said",
                 " if", " do", " will", " each", " about", " how", " up", " out", " them"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves, the
    other 68 bytes to U+0100 onwards in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def tokenizer_vocabulary(vocab_size: int) -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, token types): the 256 byte tokens in byte order, then merged tokens
    built from _MERGE_WORDS until the vocabulary is full, then <|bos|> and <|eos|>."""
    if vocab_size < 258:
        raise ValueError(f"vocab_size {vocab_size} is below 258 (256 bytes + bos + eos)")
    byte_char = _bytes_to_unicode()
    tokens = [byte_char[b] for b in range(256)]
    known = set(tokens)
    merges: list[str] = []
    num_merged = vocab_size - 256 - 2
    for word in _MERGE_WORDS:
        symbols = [byte_char[b] for b in word.encode("utf-8")]
        # Merge left to right: ((a b) c) d ...
        current = symbols[0]
        for symbol in symbols[1:]:
            if len(merges) == num_merged:
                break
            merged = current + symbol
            if merged not in known:
                merges.append(f"{current} {symbol}")
                tokens.append(merged)
                known.add(merged)
            current = merged
    # Not enough words: pad with merges of two byte tokens (still valid BPE).
    filler = iter((a, b) for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz")
    while len(merges) < num_merged:
        a, b = next(filler)
        if a + b not in known:
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            known.add(a + b)
    tokens += [BOS_TEXT, EOS_TEXT]
    types = [int(gguf.TokenType.NORMAL)] * (vocab_size - 2) + [int(gguf.TokenType.CONTROL)] * 2
    assert len(tokens) == vocab_size and len(set(tokens)) == vocab_size
    return tokens, merges, types


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _add_rope_scaling_metadata(writer: gguf.GGUFWriter, config: TinyConfig) -> None:
    """Metadata keys as llama.cpp's converter writes them. llama3 scaling writes no scaling keys
    at all: it lives only in the rope_freqs.weight tensor."""
    scaling = config.rope_scaling
    if not scaling:
        return
    kind = scaling["rope_type"]
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling["factor"])
    elif kind == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(scaling["factor"])
        writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
        # The converter copies these only when the HF config has them; ours does (HF defaults).
        writer.add_rope_scaling_yarn_beta_fast(scaling["beta_fast"])
        writer.add_rope_scaling_yarn_beta_slow(scaling["beta_slow"])
    elif kind != "llama3":
        raise ValueError(f"unknown rope_type '{kind}'")


def _add_latent_attention_metadata(writer: gguf.GGUFWriter, config: TinyConfig) -> None:
    """deepseek2's MLA keys as llama.cpp's converter writes them: with split attn_k_b /
    attn_v_b, one KV head whose key is the latent + rope part and whose value is the latent,
    the per-head sizes in *_mla; the older layout gives the per-head sizes directly."""
    m = config.mla
    writer.add_q_lora_rank(m["q_lora_rank"])
    writer.add_kv_lora_rank(m["kv_lora_rank"])
    writer.add_rope_dimension_count(m["qk_rope_head_dim"])
    qk_head = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
    if config.gguf_split_kv_b:
        writer.add_head_count_kv(1)
        writer.add_key_length(m["kv_lora_rank"] + m["qk_rope_head_dim"])
        writer.add_value_length(m["kv_lora_rank"])
        writer.add_key_length_mla(qk_head)
        writer.add_value_length_mla(m["v_head_dim"])
    else:
        writer.add_head_count_kv(config.num_heads)
        writer.add_key_length(qk_head)
        writer.add_value_length(m["v_head_dim"])
    scaling = config.rope_scaling
    if scaling and scaling.get("mscale_all_dim"):
        writer.add_rope_scaling_yarn_log_mul(0.1 * scaling["mscale_all_dim"])


def _add_experts_metadata(writer: gguf.GGUFWriter, config: TinyConfig) -> None:
    moe = config.moe
    writer.add_expert_count(moe["num_experts"])
    writer.add_expert_used_count(moe["experts_per_token"])
    if config.hf_model_type == "mixtral":
        return  # the experts are feed_forward_length wide
    writer.add_expert_feed_forward_length(moe["expert_ffn"])
    if moe.get("shared_expert_ffn"):
        writer.add_expert_shared_feed_forward_length(moe["shared_expert_ffn"])
    if not config.deepseek:
        return
    writer.add_leading_dense_block_count(moe.get("first_dense", 0))
    writer.add_expert_shared_count(moe.get("shared_experts", 0))
    writer.add_expert_weights_scale(moe.get("routed_scaling_factor", 1.0))
    writer.add_expert_weights_norm(moe.get("norm_topk_prob", False))
    v3 = config.hf_model_type != "deepseek_v2"
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v3
                                  else gguf.ExpertGatingFuncType.SOFTMAX)
    if moe.get("n_group", 1) > 1:
        writer.add_expert_group_count(moe["n_group"])
        writer.add_expert_group_used_count(moe["topk_group"])


def write_model(name: str, dtype: str, path: str | Path, *, config: TinyConfig | None = None,
                control_tokens: tuple[str, ...] = (), chat_template: str | None = None) -> Path:
    """Writes tiny model `name` ("f32", "f16", or "q8_0": every matrix quantized by the gguf
    package, for the --quantize test) as a GGUF file at `path`. `config` replaces the named one;
    `control_tokens` are appended to the vocabulary (counted in config.vocab_size) and
    `chat_template` is stored as tokenizer.chat_template."""
    config = config or get_config(name)
    if dtype not in config.dtypes + ("q8_0",):
        raise ValueError(f"dtype '{dtype}', expected one of {config.dtypes + ('q8_0',)}")
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch=config.arch)
    writer.add_name(f"tachyon-tiny-{config.name}")
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}.get(
        dtype, gguf.LlamaFileType.ALL_F32)
    writer.add_file_type(int(file_type))
    writer.add_context_length(config.context_length)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_layers + config.mtp_layers)
    if config.mtp_layers:
        writer.add_nextn_predict_layers(config.mtp_layers)
    writer.add_feed_forward_length(config.ffn_size)
    writer.add_head_count(config.num_heads)
    if config.mla is None:  # (this order keeps the dense files' bytes, and so their sha256)
        writer.add_head_count_kv(config.num_kv_heads)
        if config.head_size != config.hidden_size // config.num_heads and not config.gemma:
            writer.add_key_length(config.head_size)
            writer.add_value_length(config.head_size)
    writer.add_rope_freq_base(config.rope_theta)
    if config.gemma:
        # llama.cpp's Gemma 3 converter: head sizes as key/value lengths, no rope dimension
        # count, the window (the local layers' pattern and RoPE base are llama.cpp's fixed
        # ones: every 6th layer global, base 10000).
        writer.add_key_length(config.head_size)
        writer.add_value_length(config.head_size)
        writer.add_sliding_window(config.sliding_window)
        assert config.rope_local_theta == 10000.0
    elif config.mla is None:
        writer.add_rope_dimension_count(config.head_size)
    if config.sliding_window is not None and not config.gemma:
        # (llama.cpp's converter does not write Mistral's window; tachyon honours the key.)
        writer.add_sliding_window(config.sliding_window)
    writer.add_layer_norm_rms_eps(config.rms_eps)
    writer.add_vocab_size(config.vocab_size)
    _add_rope_scaling_metadata(writer, config)
    if config.mla is not None:
        _add_latent_attention_metadata(writer, config)
    if config.moe is not None:
        _add_experts_metadata(writer, config)

    tokens, merges, types = tokenizer_vocabulary(config.vocab_size - len(control_tokens))
    tokens = tokens + list(control_tokens)
    types = types + [int(gguf.TokenType.CONTROL)] * len(control_tokens)
    writer.add_tokenizer_model("gpt2")
    # "gpt-2" is llama.cpp's name for this pre-tokenizer (it refuses "gpt2"); the dense files
    # keep the name they were made with, and so their sha256.
    writer.add_tokenizer_pre("gpt-2" if config.moe is not None or config.mla is not None
                             or config.sliding_window is not None else "gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(BOS_TEXT))
    writer.add_eos_token_id(tokens.index(EOS_TEXT))
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    for tensor_name, array in gguf_tensors(config, dtype).items():
        quantized = dtype == "q8_0" and array.dtype == np.uint8
        writer.add_tensor(tensor_name, array,
                          raw_dtype=gguf.GGMLQuantizationType.Q8_0 if quantized else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def hf_config_json(config: TinyConfig, dtype: str) -> dict:
    """config.json as transformers writes it for this model's architecture (as the released
    checkpoints write it for deepseek_v2 / deepseek_v3 / kimi_k2 / mixtral / qwen3_moe)."""
    model_type = config.hf_model_type
    architecture = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                    "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                    "qwen2_moe": "Qwen2MoeForCausalLM",
                    "mixtral": "MixtralForCausalLM", "deepseek_v2": "DeepseekV2ForCausalLM",
                    "deepseek_v3": "DeepseekV3ForCausalLM",
                    "kimi_k2": "DeepseekV3ForCausalLM", "mistral": "MistralForCausalLM",
                    "gemma3_text": "Gemma3ForCausalLM"}[model_type]
    out = {"architectures": [architecture], "model_type": model_type,
           "hidden_size": config.hidden_size, "intermediate_size": config.ffn_size,
           "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
           "num_key_value_heads": config.num_kv_heads, "head_dim": config.head_size,
           "vocab_size": config.vocab_size, "rms_norm_eps": config.rms_eps,
           "rope_theta": config.rope_theta, "max_position_embeddings": config.context_length,
           "tie_word_embeddings": config.tied_embeddings, "hidden_act": "silu",
           "torch_dtype": "float16" if dtype == "f16" else "float32"}
    if config.rope_scaling:
        out["rope_scaling"] = dict(config.rope_scaling)
    if model_type == "mistral":
        out["sliding_window"] = config.sliding_window
    if config.gemma:
        # As google/gemma-3-270m's config.json (transformers 4.5x) writes it.
        del out["hidden_act"]
        out.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=config.head_size,
                   sliding_window=config.sliding_window, rope_local_base_freq=config.rope_local_theta,
                   layer_types=["sliding_attention" if config.layer_is_local(i) else "full_attention"
                                for i in range(config.num_layers)],
                   final_logit_softcapping=None, attn_logit_softcapping=None,
                   attention_bias=False, _sliding_window_pattern=6, bos_token_id=None,
                   eos_token_id=None, pad_token_id=None)
    moe = config.moe
    if config.mla is not None:
        del out["head_dim"]
        out.update({key: value or None for key, value in config.mla.items()})
        out.update(attention_bias=False, n_routed_experts=moe["num_experts"],
                   num_experts_per_tok=moe["experts_per_token"],
                   moe_intermediate_size=moe["expert_ffn"],
                   n_shared_experts=moe.get("shared_experts", 0),
                   first_k_dense_replace=moe.get("first_dense", 0),
                   norm_topk_prob=moe.get("norm_topk_prob", False),
                   routed_scaling_factor=moe.get("routed_scaling_factor", 1.0), moe_layer_freq=1)
        if config.mtp_layers:
            out["num_nextn_predict_layers"] = config.mtp_layers
        if model_type == "deepseek_v2":
            out.update(topk_method="greedy", scoring_func="softmax", n_group=None, topk_group=None)
        else:
            out.update(topk_method="noaux_tc", scoring_func="sigmoid", n_group=moe["n_group"],
                       topk_group=moe["topk_group"])
    elif model_type == "mixtral":
        out.update(num_local_experts=moe["num_experts"], num_experts_per_tok=moe["experts_per_token"])
        del out["head_dim"]
    elif model_type in ("qwen3_moe", "qwen2_moe"):
        out.update(num_experts=moe["num_experts"], num_experts_per_tok=moe["experts_per_token"],
                   moe_intermediate_size=moe["expert_ffn"], norm_topk_prob=moe["norm_topk_prob"],
                   decoder_sparse_step=1, mlp_only_layers=[])
        if model_type == "qwen2_moe":
            out.update(shared_expert_intermediate_size=moe["shared_expert_ffn"],
                       use_sliding_window=False, qkv_bias=True)
        else:
            out["attention_bias"] = False
    return out


def write_hf_folder(name: str, dtype: str, path: str | Path) -> Path:
    """Writes tiny model `name` as a Hugging Face folder (config.json + model.safetensors, written
    by the PyPI safetensors package): the same weights as write_model's GGUF, unpermuted, and
    for "f16" the 2-D matrices stored as F16 (as in the F16 GGUF)."""
    from safetensors.numpy import save_file  # only this function needs it

    config = get_config(name)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for hf_name, array in hf_weights(config, "f32").items():
        if dtype == "f16" and array.ndim == 2:
            array = array.astype(np.float16)
        tensors[hf_name] = np.ascontiguousarray(array)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(hf_config_json(config, dtype), indent=2) + "\n")
    write_hf_tokenizer(config, path)
    return path


# A template for the folders' tokenizer_config.json (the GGUF files carry none).
HF_CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<{{ message['role'] }}>"
                    "{{ message['content'] }}{% endfor %}{% if add_generation_prompt %}"
                    "<assistant>{% endif %}")


def write_hf_tokenizer(config: TinyConfig, path: Path) -> None:
    """tokenizer.json written by the PyPI `tokenizers` package (GPT-2-style byte-level BPE with
    the GGUF file's vocabulary and merges, <|bos|> and <|eos|> as special added tokens) and a
    tokenizer_config.json naming them, with a small chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens, merges, _ = tokenizer_vocabulary(config.vocab_size)
    vocab = {token: i for i, token in enumerate(tokens[:-2])}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges])
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(BOS_TEXT, special=True),
                                  AddedToken(EOS_TEXT, special=True)])
    assert tokenizer.token_to_id(EOS_TEXT) == len(tokens) - 1
    tokenizer.save(str(path / "tokenizer.json"))
    tokenizer_config = {"bos_token": BOS_TEXT, "eos_token": EOS_TEXT, "add_bos_token": False,
                        "chat_template": HF_CHAT_TEMPLATE}
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


FP8_BLOCK = 32  # quantization_config.weight_block_size: several blocks per tiny matrix
_FP8_MATRICES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                 "gate_proj.weight", "up_proj.weight", "down_proj.weight")


def _fp8_quantize(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeepSeek-V3-style block FP8: per FP8_BLOCK x FP8_BLOCK block, scale = amax / 448 and
    the values weight / scale in E4M3 (ml_dtypes' rounding). Returns (E4M3 bytes as uint8,
    f32 scale_inv [ceil(rows / B), ceil(cols / B)])."""
    import ml_dtypes

    rows, cols = weight.shape
    block_rows, block_cols = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
    scale = np.zeros((block_rows, block_cols), np.float32)
    quantized = np.zeros_like(weight, dtype=ml_dtypes.float8_e4m3fn)
    for i in range(block_rows):
        for j in range(block_cols):
            block = weight[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
            scale[i, j] = np.float32(np.abs(block).max() / 448.0)
            quantized[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = (
                block / scale[i, j]).astype(ml_dtypes.float8_e4m3fn)
    return quantized.view(np.uint8), scale


def write_hf_fp8_folders(name: str, path: str | Path) -> tuple[Path, Path]:
    """Tiny model `name` with its layer projections in block-scaled FP8 (F8_E4M3 + F32
    weight_scale_inv, as DeepSeek-V3 ships), and beside it the same model with those matrices
    dequantized as the model's own code does (E4M3 -> f32, times the block's scale, rounded to
    BF16; computed here with ml_dtypes and numpy) and stored as BF16. Returns (fp8, bf16)."""
    import ml_dtypes
    import safetensors

    config = get_config(name)
    fp8_dir, bf16_dir = Path(f"{path}.fp8.hf"), Path(f"{path}.fp8-bf16.hf")
    keep: list = []

    def spec(dtype: str, array: np.ndarray) -> "safetensors.TensorSpec":
        array = np.ascontiguousarray(array)
        keep.append(array)
        return safetensors.TensorSpec(dtype=dtype, shape=list(array.shape),
                                      data_ptr=array.ctypes.data, data_len=array.nbytes)

    fp8_tensors, bf16_tensors = {}, {}
    for hf_name, array in hf_weights(config, "f32").items():
        if hf_name.endswith(_FP8_MATRICES):
            quantized, scale = _fp8_quantize(array)
            fp8_tensors[hf_name] = spec("float8_e4m3fn", quantized)
            fp8_tensors[hf_name + "_scale_inv"] = spec("float32", scale)
            full_scale = np.repeat(np.repeat(scale, FP8_BLOCK, 0), FP8_BLOCK, 1)
            values = quantized.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * \
                full_scale[:array.shape[0], :array.shape[1]]
            bf16_tensors[hf_name] = spec("bfloat16",
                                         values.astype(ml_dtypes.bfloat16).view(np.uint16))
        else:
            fp8_tensors[hf_name] = spec("float32", array)
            bf16_tensors[hf_name] = spec("float32", array)
    for folder, tensors in ((fp8_dir, fp8_tensors), (bf16_dir, bf16_tensors)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(
            bytes(safetensors.serialize(tensors, metadata={"format": "pt"})))
        hf_config = hf_config_json(config, "f32")
        if folder == fp8_dir:
            hf_config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                                "activation_scheme": "dynamic",
                                                "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
        (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
        write_hf_tokenizer(config, folder)
    return fp8_dir, bf16_dir


def hf_folder_name(name: str, dtype: str) -> str:
    return f"{name}.{dtype}.hf"


def main() -> None:
    """tiny_models.py OUT_DIR [NAME.DTYPE ...]: every config in each of its dtypes, or the
    named ones (e.g. deepseek_v3_groups.q8_0)."""
    if len(sys.argv) < 2:
        sys.exit("usage: tiny_models.py OUT_DIR [NAME.DTYPE ...]")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    wanted = [tuple(arg.rsplit(".", 1)) for arg in sys.argv[2:]]
    if not wanted:
        wanted = [(config.name, dtype) for config in CONFIGS for dtype in config.dtypes]
    for name, dtype in wanted:
        path = write_model(name, dtype, out / gguf_file_name(name, dtype))
        print(f"{path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
