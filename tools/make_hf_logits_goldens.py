#!/usr/bin/env python3
"""Golden logits for the tiny models of tools/tiny_models.py, computed by Hugging Face
transformers (the independent reference) from exactly the weights the GGUF files hold.

Needs torch + transformers, which the test venv does not have:

    python3 -m venv .venv-reference
    .venv-reference/bin/pip install -r tools/requirements-reference.txt
    .venv-reference/bin/python tools/make_hf_logits_goldens.py [OUT_DIR]

OUT_DIR (default tests/golden/logits) gets, per config and dtype, `<config>.<f32|f16>.logits`
(little-endian float32, row-major [64 positions, vocab]) and one manifest.json. The C++ test
writes the GGUF files itself with tools/tiny_models.py (same weights, bit for bit) and compares.

Before writing anything the script checks, and stops on any failure:
  * the GGUF written by tiny_models.py reads back (gguf.GGUFReader) to exactly the weights loaded
    into the HF model, after undoing the llama Q/K row permutation; metadata matches the config;
  * ggml's "normal" RoPE on the permuted llama Q rows equals HF's rotate_half RoPE on the
    unpermuted rows (the permutation goes the right way, not just round-trips);
  * rope_freqs.weight (llama3 scaling) reproduces HF's scaled inv_freq;
  * each RoPE-scaled config's logits differ clearly from the same model without scaling.
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_models  # noqa: E402
from tiny_models import TinyConfig  # noqa: E402

RELATIVE_TOLERANCE = 1e-3        # max |Δ| <= 1e-3 * max|logit|
ABSOLUTE_TOLERANCE = 1e-4        # MoE / MLA configs (f32 weights, f32 cache): max |Δ| <= 1e-4
MIN_ROUTING_MARGIN = 2e-4        # every token's k-th and (k+1)-th expert apart by this much
MIN_SCALING_EFFECT = 0.05        # a RoPE-scaled model must move some logit by at least this much

# --------------------------------------------------------------------------------------------
# Building the Hugging Face model
# --------------------------------------------------------------------------------------------


def hf_config(config: TinyConfig, with_scaling: bool = True) -> transformers.PretrainedConfig:
    rope = {"rope_type": "default", "rope_theta": config.rope_theta}
    if with_scaling and config.rope_scaling:
        rope = {**config.rope_scaling, "rope_theta": config.rope_theta}
    common = dict(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        intermediate_size=config.ffn_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_size, hidden_act="silu", rms_norm_eps=config.rms_eps,
        max_position_embeddings=config.context_length, rope_parameters=rope,
        tie_word_embeddings=config.tied_embeddings, attention_dropout=0.0,
    )
    if config.arch == "llama":
        return transformers.LlamaConfig(**common, attention_bias=False, mlp_bias=False)
    if config.arch == "qwen2":
        return transformers.Qwen2Config(**common, use_sliding_window=False)
    if config.arch == "qwen3":
        return transformers.Qwen3Config(**common, attention_bias=False, use_sliding_window=False)
    raise ValueError(f"unknown arch '{config.arch}'")


_MODEL_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def build_hf_model(config: TinyConfig, weights: dict[str, np.ndarray], with_scaling: bool = True):
    """An eager-attention float32 HF model holding `weights` (HF names)."""
    model_class = getattr(transformers, _MODEL_CLASSES[config.arch])
    cfg = hf_config(config, with_scaling)
    cfg._attn_implementation = "eager"
    model = model_class(cfg).to(torch.float32).eval()
    state = {name: torch.from_numpy(array.copy()) for name, array in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = {"lm_head.weight"} if config.tied_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise RuntimeError(f"{config.name}: state dict mismatch, missing {missing}, unexpected {unexpected}")
    if config.tied_embeddings:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # Every parameter must now be exactly one of ours (no random init left over).
    for name, param in model.state_dict().items():
        tied_head = config.tied_embeddings and name == "lm_head.weight"
        source = weights["model.embed_tokens.weight"] if tied_head else weights.get(name)
        if source is None or not np.array_equal(param.numpy(), source):
            raise RuntimeError(f"{config.name}: HF parameter {name} is not the tiny_models weight")
    return model


def build_hf_moe_model(config: TinyConfig, weights: dict[str, np.ndarray], folder: Path):
    """The MoE / MLA models through transformers' own loading of the Hugging Face folder that
    tiny_models.write_hf_folder writes (released checkpoints' layout: one tensor per expert,
    which transformers fuses), then checked parameter by parameter against `weights`."""
    hf_config = json.loads((folder / "config.json").read_text())
    if hf_config["model_type"] == "kimi_k2":  # Kimi-K2 ships DeepseekV3's code as remote code
        hf_config["model_type"] = "deepseek_v3"
        (folder / "config.json").write_text(json.dumps(hf_config))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager").eval()
    # transformers runs no multi-token prediction layer (it drops their weights on load).
    trunk = {name: array for name, array in weights.items()
             if not name.startswith(tuple(f"model.layers.{layer}."
                                          for layer in range(config.num_layers,
                                                             config.num_layers + config.mtp_layers)))}
    expected = fused_expert_weights(config, trunk)
    state = model.state_dict()
    if set(state) != set(expected):
        raise RuntimeError(f"{config.name}: transformers has {sorted(set(state) - set(expected))}, "
                           f"lacks {sorted(set(expected) - set(state))}")
    for name, param in state.items():
        if not np.array_equal(param.numpy(), expected[name]):
            raise RuntimeError(f"{config.name}: HF parameter {name} is not the tiny_models weight")
    return model


def fused_expert_weights(config: TinyConfig, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's per-expert tensors as transformers 5 holds them: per layer
    mlp.experts.gate_up_proj [E, 2I, H] (gate rows first) and mlp.experts.down_proj [E, H, I];
    Mixtral's block_sparse_moe renamed mlp."""
    out = {}
    stacks: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for name, array in weights.items():
        parts = name.split(".")
        if "experts" in parts and parts[-3].isdigit():
            prefix = ".".join(parts[:3]) + ".mlp.experts."
            stacks.setdefault(prefix, {}).setdefault(int(parts[-3]), {})[parts[-2]] = array
            continue
        out[name.replace("block_sparse_moe.", "mlp.")] = array
    for prefix, experts in stacks.items():
        gate_up, down = [], []
        for e in range(len(experts)):
            w = experts[e]
            gate_up.append(np.concatenate([w.get("gate_proj", w.get("w1")),
                                           w.get("up_proj", w.get("w3"))]))
            down.append(w.get("down_proj", w.get("w2")))
        out[prefix + "gate_up_proj"] = np.stack(gate_up)
        out[prefix + "down_proj"] = np.stack(down)
    if config.tied_embeddings:
        out["lm_head.weight"] = weights["model.embed_tokens.weight"]
    return out


def routing_margin(config: TinyConfig, model, token_ids: list[int]) -> float:
    """The smallest gap, over tokens and MoE layers, between the k-th chosen expert and the best
    one not chosen, in what each router ranks (sigmoid scores plus bias and group scores for
    DeepSeek-V3, logits for softmax routers): a gap near rounding would make the choice, and
    so the logits, fragile."""
    margins = []
    k = config.moe["experts_per_token"]

    def hook(module, inputs, output):
        hidden = inputs[0].reshape(-1, inputs[0].shape[-1]).to(torch.float32)
        logits = hidden @ module.weight.to(torch.float32).T
        if config.hf_model_type in ("deepseek_v3", "kimi_k2"):
            scores = logits.sigmoid() + module.e_score_correction_bias
            n_group, per = module.num_group, logits.shape[-1] // module.num_group
            if n_group > 1:
                group = scores.view(-1, n_group, per).topk(2, dim=-1)[0].sum(-1)
                top_groups = group.topk(module.topk_group + (1 if module.topk_group < n_group else 0), dim=-1)[0]
                if module.topk_group < n_group:
                    margins.append(float((top_groups[:, -2] - top_groups[:, -1]).min()))
                keep = torch.zeros_like(group).scatter_(1, group.topk(module.topk_group, dim=-1)[1], 1)
                scores = scores.masked_fill(~keep.repeat_interleave(per, 1).bool(), float("-inf"))
        else:
            scores = logits  # softmax keeps the logits' order; their gaps are what rounding moves
        ranked = scores.topk(k + 1, dim=-1)[0]
        margins.append(float((ranked[:, k - 1] - ranked[:, k]).min()))

    hooks = [m.register_forward_hook(hook) for name, m in model.named_modules()
             if name.endswith("mlp.gate")]
    run_logits(model, token_ids)
    for h in hooks:
        h.remove()
    return min(margins)


def run_logits(model, token_ids: list[int]) -> np.ndarray:
    """Logits [num_tokens, vocab] for one sequence at positions 0..n-1."""
    with torch.no_grad():
        ids = torch.tensor([token_ids], dtype=torch.long)
        return model(input_ids=ids).logits[0].to(torch.float32).numpy()


# --------------------------------------------------------------------------------------------
# Self-tests against the GGUF file
# --------------------------------------------------------------------------------------------

def read_gguf_tensor(tensor) -> np.ndarray:
    """A GGUFReader tensor as float32 in numpy [out, in] order (GGUF shape reversed)."""
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return np.asarray(tensor.data).astype(np.float32).reshape(shape)


def check_gguf_matches_moe(config: TinyConfig, weights: dict[str, np.ndarray], path: Path) -> None:
    """MoE / MLA / sliding-window files: every GGUF tensor reads back to the HF weights it came
    from (experts unstacked, kv_b rebuilt from attn_k_b / attn_v_b, Gemma's norms plus the 1
    the converter adds), and every HF weight is in the file."""
    reader = gguf.GGUFReader(str(path))
    rebuilt: dict[str, np.ndarray] = {}
    gguf_names = {}
    for name in weights:
        if tiny_models._expert_parts(name) is None:
            gguf_names[tiny_models.gguf_tensor_name(name, config.gemma)] = name
    k_b, v_b = {}, {}
    for tensor in reader.tensors:
        data = read_gguf_tensor(tensor)
        parts = tensor.name.split(".")
        if tensor.name.endswith("_exps.weight"):
            for name in weights:
                expert = tiny_models._expert_parts(name)
                if expert and f"blk.{expert[0]}.{expert[2]}" == tensor.name:
                    rebuilt[name] = data[expert[1]]
        elif tensor.name.endswith("attn_k_b.weight"):
            k_b[parts[1]] = data
        elif tensor.name.endswith("attn_v_b.weight"):
            v_b[parts[1]] = data
        else:
            if config.gguf_rope_layout == "normal" and tensor.name.endswith("attn_q.weight"):
                data = tiny_models.unpermute_rows_from_gguf(data, config.num_heads)
            elif config.gguf_rope_layout == "normal" and tensor.name.endswith("attn_k.weight"):
                data = tiny_models.unpermute_rows_from_gguf(data, config.num_kv_heads)
            rebuilt[gguf_names[tensor.name]] = data
    for layer, keys in k_b.items():
        values = v_b[layer]
        heads = keys.shape[0]
        kv_b = np.concatenate([keys.transpose(0, 2, 1), values], axis=1)  # [heads, nope + v, latent]
        rebuilt[f"model.layers.{layer}.self_attn.kv_b_proj.weight"] = kv_b.reshape(-1, keys.shape[1])
        assert heads == config.num_heads
    if set(rebuilt) != set(weights):
        raise AssertionError(f"{path.name}: GGUF lacks {sorted(set(weights) - set(rebuilt))}, "
                             f"has extra {sorted(set(rebuilt) - set(weights))}")
    for name, array in weights.items():
        if config.gemma and name.endswith("norm.weight"):
            array = array + np.float32(1.0)
        if not np.array_equal(rebuilt[name], array):
            raise AssertionError(f"{path.name}: {name} does not read back from the GGUF")


def check_gguf_matches(config: TinyConfig, dtype: str, weights: dict[str, np.ndarray], path: Path) -> None:
    if config.moe is not None or config.mla is not None or config.sliding_window is not None:
        return check_gguf_matches_moe(config, weights, path)
    reader = gguf.GGUFReader(str(path))
    hf_name_by_gguf = {tiny_models.gguf_tensor_name(name): name for name in weights}
    seen = set()
    for tensor in reader.tensors:
        if tensor.name == "rope_freqs.weight":
            check_rope_freqs_tensor(config, tensor, path)
            seen.add(tensor.name)
            continue
        is_matrix = len(tensor.shape) == 2
        expected_type = (gguf.GGMLQuantizationType.F16 if dtype == "f16" and is_matrix
                         else gguf.GGMLQuantizationType.F32)
        if tensor.tensor_type != expected_type:
            raise AssertionError(f"{path.name}: {tensor.name} is {tensor.tensor_type.name}, "
                                 f"expected {expected_type.name}")
        hf_name = hf_name_by_gguf[tensor.name]
        data = read_gguf_tensor(tensor)
        if config.gguf_rope_layout == "normal":
            if tensor.name.endswith("attn_q.weight"):
                data = tiny_models.unpermute_rows_from_gguf(data, config.num_heads)
            elif tensor.name.endswith("attn_k.weight"):
                data = tiny_models.unpermute_rows_from_gguf(data, config.num_kv_heads)
        if not np.array_equal(data, weights[hf_name]):
            raise AssertionError(f"{path.name}: {tensor.name} does not read back to HF {hf_name}")
        seen.add(hf_name)
    expected = set(weights)
    if tiny_models.rope_freqs_factors(config) is not None:
        expected.add("rope_freqs.weight")
    if seen != expected:
        raise AssertionError(f"{path.name}: tensors missing from the GGUF: {sorted(expected - seen)}")
    check_metadata(config, reader, path)


def check_rope_freqs_tensor(config: TinyConfig, tensor, path: Path) -> None:
    factors = tiny_models.rope_freqs_factors(config)
    if factors is None:
        raise AssertionError(f"{path.name}: rope_freqs.weight in a model without llama3 scaling")
    if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
        raise AssertionError(f"{path.name}: rope_freqs.weight is {tensor.tensor_type.name}, expected F32")
    if not np.array_equal(read_gguf_tensor(tensor), factors):
        raise AssertionError(f"{path.name}: rope_freqs.weight holds other values")


def check_metadata(config: TinyConfig, reader: gguf.GGUFReader, path: Path) -> None:
    arch = config.arch

    def value(key: str):
        field = reader.get_field(key)
        return None if field is None else field.contents()

    expected = {
        "general.architecture": arch,
        f"{arch}.embedding_length": config.hidden_size,
        f"{arch}.block_count": config.num_layers,
        f"{arch}.feed_forward_length": config.ffn_size,
        f"{arch}.attention.head_count": config.num_heads,
        f"{arch}.attention.head_count_kv": config.num_kv_heads,
        f"{arch}.rope.dimension_count": config.head_size,
    }
    for key, want in expected.items():
        if value(key) != want:
            raise AssertionError(f"{path.name}: {key} = {value(key)}, expected {want}")
    if not np.isclose(value(f"{arch}.rope.freq_base"), config.rope_theta, rtol=1e-7):
        raise AssertionError(f"{path.name}: rope.freq_base")
    if not np.isclose(value(f"{arch}.attention.layer_norm_rms_epsilon"), config.rms_eps, rtol=1e-6):
        raise AssertionError(f"{path.name}: rms eps")
    if len(value("tokenizer.ggml.tokens")) != config.vocab_size:
        raise AssertionError(f"{path.name}: vocabulary size")


def check_rope_pairing(config: TinyConfig, model, weights: dict[str, np.ndarray]) -> None:
    """For llama: rotating adjacent pairs (2j, 2j+1) of the permuted (GGUF) Q projection by
    pos * inv_freq[j] -- ggml's normal mode -- must give HF's rotate_half result, permuted.
    For qwen: the GGUF rows are HF's, and NeoX mode is HF's rotate_half itself."""
    if config.gguf_rope_layout != "normal":
        return
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    x = torch.randn(7, config.hidden_size)                    # 7 tokens
    positions = torch.arange(7)[None, :] * 5                 # reach angles beyond 2π
    w_hf = torch.from_numpy(weights["model.layers.0.self_attn.q_proj.weight"])
    w_gguf = torch.from_numpy(tiny_models.permute_rows_for_gguf(w_hf.numpy(), config.num_heads))
    heads, dim = config.num_heads, config.head_size

    q_hf = (x @ w_hf.T).view(7, heads, dim).transpose(0, 1)[None]    # [1, heads, 7, dim]
    cos, sin = model.model.rotary_emb(q_hf, positions)
    q_hf_rot, _ = apply_rotary_pos_emb(q_hf, q_hf, cos, sin)

    # ggml normal mode on the GGUF rows; cos/sin[:, :, :dim/2] hold one value per pair j.
    q = (x @ w_gguf.T).view(7, heads, dim // 2, 2)
    c, s = cos[0, :, None, : dim // 2], sin[0, :, None, : dim // 2]  # [7, 1, dim/2]
    even, odd = q[..., 0], q[..., 1]
    rotated = torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).reshape(7, heads * dim)
    expected = torch.from_numpy(tiny_models.permute_rows_for_gguf(
        q_hf_rot[0].transpose(0, 1).reshape(7, heads * dim).T.numpy(), heads)).T
    if not torch.allclose(rotated, expected, atol=1e-5):
        raise AssertionError(f"{config.name}: normal-mode RoPE on permuted Q != HF RoPE")


def check_rope_freqs(config: TinyConfig, model) -> None:
    """llama3: HF's scaled inv_freq == unscaled inv_freq / rope_freqs.weight."""
    factors = tiny_models.rope_freqs_factors(config)
    if factors is None:
        return
    dim = config.head_size
    base = 1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    hf_inv_freq = model.model.rotary_emb.inv_freq.numpy().astype(np.float64)
    if not np.allclose(base / factors, hf_inv_freq, rtol=1e-5):
        raise AssertionError(f"{config.name}: rope_freqs does not reproduce HF's llama3 inv_freq\n"
                             f"{base / factors}\n{hf_inv_freq}")


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def summarize(logits: np.ndarray) -> dict:
    top2 = np.sort(logits, axis=-1)[:, -2:]
    gaps = top2[:, 1] - top2[:, 0]
    return {
        "max_abs_logit": float(np.abs(logits).max()),
        "argmax": [int(i) for i in logits.argmax(-1)],
        # Per position: best minus second-best logit. Compare argmax only where this exceeds
        # twice the tolerance; elsewhere two tokens are within rounding of each other.
        "top1_top2_gap": [round(float(g), 5) for g in gaps],
        "min_top1_top2_gap": float(gaps.min()),
    }


def make_one(config: TinyConfig, dtype: str, out: Path, tmp: Path) -> dict:
    weights = tiny_models.hf_weights(config, dtype)
    gguf_name = tiny_models.gguf_file_name(config.name, dtype)
    tiny_models.write_model(config.name, dtype, tmp / gguf_name)
    gguf_sha256 = hashlib.sha256((tmp / gguf_name).read_bytes()).hexdigest()
    check_gguf_matches(config, dtype, weights, tmp / gguf_name)

    # Models transformers builds from the folder tiny_models writes (and checked against it).
    moe = config.moe is not None or config.mla is not None or config.sliding_window is not None
    if moe:
        folder = tiny_models.write_hf_folder(config.name, dtype, tmp / f"{config.name}.hf")
        model = build_hf_moe_model(config, weights, folder)
    else:
        model = build_hf_model(config, weights)
        check_rope_pairing(config, model, weights)
        check_rope_freqs(config, model)
    ids = tiny_models.input_token_ids(config)
    logits = run_logits(model, ids)
    # How exact is the float32 golden itself? Compare with the same model in float64.
    logits64 = run_logits(model.to(torch.float64), ids)
    f32_error = float(np.abs(logits - logits64).max())

    file_name = f"{config.name}.{dtype}.logits"
    logits.astype("<f4").tofile(out / file_name)
    rotary = model.model.rotary_emb
    if config.gemma:  # one RoPE per layer kind; the global one's goes in the manifest
        rotary.inv_freq = rotary.full_attention_inv_freq
        rotary.attention_scaling = rotary.full_attention_attention_scaling
    entry = {
        "config": config.name, "dtype": dtype, "gguf": gguf_name, "gguf_sha256": gguf_sha256,
        "logits_file": file_name,
        "architecture": config.arch, "description": config.description,
        "vocab_size": config.vocab_size, "num_tokens": len(ids), "token_ids": ids,
        "shape": list(logits.shape),
        **summarize(logits),
        "float32_vs_float64_max_abs_diff": f32_error,
        "hf_inv_freq": [float(f) for f in rotary.inv_freq.to(torch.float64)],
        "hf_attention_scaling": float(rotary.attention_scaling),
        "tolerance": tolerance_rule(dtype, moe),
    }
    if config.sliding_window is not None:
        entry["window_effect"] = window_effect(config, folder, ids, logits)
    if moe:
        entry["absolute_tolerance"] = ABSOLUTE_TOLERANCE
        entry["hf_model_type"] = config.hf_model_type
        if config.moe is not None:
            margin = routing_margin(config, model.to(torch.float32), ids)
            entry["min_routing_margin"] = margin
            if margin < MIN_ROUTING_MARGIN:
                raise AssertionError(f"{config.name}: routing margin {margin:.2e} is below "
                                     f"{MIN_ROUTING_MARGIN}; pick another seed")
        return entry
    if config.rope_scaling and dtype == "f32":
        entry["scaling_effect"] = scaling_effect(config, weights, ids, logits)
    return entry


def window_effect(config: TinyConfig, folder: Path, ids, logits) -> dict:
    """The same folder with a window longer than the prompt: the golden must tell the two
    apart from the first position past the window on."""
    hf = json.loads((folder / "config.json").read_text())
    hf["sliding_window"] = 4096
    wide = folder.with_name(folder.name + ".wide")
    wide.mkdir(exist_ok=True)
    (wide / "config.json").write_text(json.dumps(hf))
    (wide / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(wide), dtype=torch.float32, attn_implementation="eager").eval()
    plain = run_logits(model, ids)
    diff = np.abs(plain - logits)
    window = config.sliding_window
    effect = {"max_abs_diff_inside_window": float(diff[:window].max()),
              "max_abs_diff_past_window": float(diff[window:].max())}
    print(f"  {config.name}: the window moves logits past it by up to "
          f"{effect['max_abs_diff_past_window']:.3f}, inside it by "
          f"{effect['max_abs_diff_inside_window']:.1e}")
    if effect["max_abs_diff_past_window"] < MIN_SCALING_EFFECT:
        raise AssertionError(f"{config.name}: the sliding window barely changes the logits")
    if effect["max_abs_diff_inside_window"] > 1e-5:
        raise AssertionError(f"{config.name}: the window changes positions it cannot reach")
    return effect


def tolerance_rule(dtype: str, moe: bool = False) -> str:
    if moe:
        return (f"max |logit - golden| <= {ABSOLUTE_TOLERANCE:g} with an f32 cache "
                f"({RELATIVE_TOLERANCE:g} * max_abs_logit with an f16 cache)")
    rule = f"max |logit - golden| <= {RELATIVE_TOLERANCE:g} * max_abs_logit"
    if dtype == "f16":
        rule += (" when F16 weights are widened to f32 and activations stay f32 (the golden uses the "
                 "f16-rounded weights exactly); rounding activations to f16 as well needs ~1e-2")
    return rule


def scaling_effect(config: TinyConfig, weights, ids, logits) -> dict:
    """The same weights run without RoPE scaling: the golden must tell the two apart."""
    plain = run_logits(build_hf_model(config, weights, with_scaling=False), ids)
    diff = np.abs(plain - logits)
    effect = {"max_abs_diff_vs_unscaled": float(diff.max()),
              "positions_with_other_argmax": int((plain.argmax(-1) != logits.argmax(-1)).sum())}
    print(f"  {config.name}: scaling moves logits by up to {effect['max_abs_diff_vs_unscaled']:.3f} "
          f"(tolerance {RELATIVE_TOLERANCE * np.abs(logits).max():.4f}), "
          f"argmax differs at {effect['positions_with_other_argmax']}/64 positions")
    if diff.max() < MIN_SCALING_EFFECT:
        raise AssertionError(f"{config.name}: RoPE scaling barely changes the logits")
    return effect


def main() -> None:
    """make_hf_logits_goldens.py [OUT_DIR] [--only NAME ...]: --only regenerates those configs'
    entries and keeps the manifest's others (goldens computed on another CPU stay put)."""
    args = sys.argv[1:]
    only = set()
    if "--only" in args:
        at = args.index("--only")
        only, args = set(args[at + 1:]), args[:at]
    out = Path(args[0] if args else "tests/golden/logits")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    entries = []
    kept = []
    if only:
        previous = json.loads((out / "manifest.json").read_text())
        kept = [e for e in previous["entries"] if e["config"] not in only]
    with tempfile.TemporaryDirectory() as tmp:
        for config in tiny_models.CONFIGS:
            if only and config.name not in only:
                continue
            for dtype in config.dtypes:
                entry = make_one(config, dtype, out, Path(tmp))
                entries.append(entry)
                print(f"{entry['logits_file']}: max|logit| {entry['max_abs_logit']:.3f}, "
                      f"min top-2 gap {entry['min_top1_top2_gap']:.4f}, "
                      f"f32 vs f64 {entry['float32_vs_float64_max_abs_diff']:.2e}"
                      + (f", routing margin {entry['min_routing_margin']:.2e}"
                         if "min_routing_margin" in entry else ""))
    f32 = {e["config"]: e for e in entries if e["dtype"] == "f32"}
    for e in entries:
        if e["dtype"] == "f16":
            golden32 = np.fromfile(out / f32[e["config"]]["logits_file"], dtype="<f4")
            golden16 = np.fromfile(out / e["logits_file"], dtype="<f4")
            e["max_abs_diff_vs_f32_golden"] = float(np.abs(golden32 - golden16).max())
    order = {config.name: i for i, config in enumerate(tiny_models.CONFIGS)}
    entries = sorted(kept + entries, key=lambda e: (order[e["config"]], e["dtype"] != "f32"))
    manifest = {
        "generator": "tools/make_hf_logits_goldens.py (weights and GGUF files: tools/tiny_models.py)",
        "format": "little-endian float32, row-major [num_tokens, vocab_size], positions 0..num_tokens-1",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "gguf": _gguf_version()},
        "reference": "transformers *ForCausalLM, float32, attn_implementation=eager, CPU",
        "relative_tolerance": RELATIVE_TOLERANCE,
        "entries": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(entries)} golden logits entries and manifest.json to {out}")


def _gguf_version() -> str:
    from importlib.metadata import version
    return version("gguf")


if __name__ == "__main__":
    main()
