#!/usr/bin/env python3
"""Golden logits of the multi-token prediction ("NextN") layer of the tiny DeepSeek-V3 model of
tools/tiny_models.py (deepseek_v3_groups, one MTP layer), for tests/models/mtp_layer_test.cpp.

transformers drops MTP weights on load, so the reference is assembled from its parts: the trunk
is transformers' DeepseekV3 model (its final hidden states, after the output norm), the MTP
layer's decoder layer is transformers' DeepseekV3DecoderLayer loaded with that layer's weights,
and the glue is DeepSeek-V3's published MTP module as the serving engines run it: for position
p, eh_proj · [enorm(embedding of token p+1), hnorm(trunk hidden at p)], the decoder layer at RoPE
position p (causal over the MTP layer's own earlier positions), then shared_head.norm and
shared_head.head give the logits of token p+2.

    .venv-reference/bin/python tools/make_mtp_golden.py [OUT_DIR]

OUT_DIR (default tests/golden/mtp) gets deepseek_v3_groups.mtp.logits (little-endian float32,
[63 positions, vocab]) and manifest.json (the GGUF's sha256, the prompt, the routing margin).
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_models  # noqa: E402
from make_hf_logits_goldens import build_hf_moe_model, fused_expert_weights  # noqa: E402

NAME = "deepseek_v3_groups"
MIN_ROUTING_MARGIN = 2e-4


def rms_norm(x: torch.Tensor, weight: np.ndarray, eps: float) -> torch.Tensor:
    norm = deepseek.DeepseekV3RMSNorm(x.shape[-1], eps=eps)
    norm.weight.data = torch.from_numpy(weight)
    return norm(x)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests/golden/mtp"
    config = tiny_models.get_config(NAME)
    assert config.mtp_layers == 1
    weights = tiny_models.hf_weights(config)
    ids = tiny_models.input_token_ids(config)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "hf"
        tiny_models.write_hf_folder(NAME, "f32", folder)
        model = build_hf_moe_model(config, weights, folder)
        gguf_path = Path(tmp) / f"{NAME}.f32.gguf"
        tiny_models.write_model(NAME, "f32", gguf_path)
        gguf_sha256 = hashlib.sha256(gguf_path.read_bytes()).hexdigest()

    eps = config.rms_eps
    with torch.no_grad():
        trunk = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]  # after model.norm
        # The MTP layer's decoder layer, from transformers, with its own weights.
        index = config.num_layers
        prefix = f"model.layers.{index}."
        own = {"eh_proj.weight", "enorm.weight", "hnorm.weight", "embed_tokens.weight",
               "shared_head.norm.weight", "shared_head.head.weight"}
        layer_weights = {name: array for name, array in weights.items()
                         if name.startswith(prefix) and name[len(prefix):] not in own}
        layer_state = {name[len(prefix):]: torch.from_numpy(array)
                       for name, array in fused_expert_weights(config, layer_weights).items()
                       if name.startswith(prefix)}
        layer = deepseek.DeepseekV3DecoderLayer(model.config, layer_idx=index).eval()
        missing, unexpected = layer.load_state_dict(layer_state, strict=True), None
        del missing, unexpected

        count = len(ids) - 1
        positions = torch.arange(count).unsqueeze(0)
        embedded = torch.from_numpy(weights[prefix + "embed_tokens.weight"][ids[1:]])
        x = torch.cat([rms_norm(embedded, weights[prefix + "enorm.weight"], eps),
                       rms_norm(trunk[:count], weights[prefix + "hnorm.weight"], eps)], dim=-1)
        x = x @ torch.from_numpy(weights[prefix + "eh_proj.weight"]).T
        mask = torch.full((count, count), float("-inf")).triu(1)[None, None]
        margins = []
        k = config.moe["experts_per_token"]

        def hook(module, inputs, output):
            hidden = inputs[0].reshape(-1, inputs[0].shape[-1])
            scores = (hidden @ module.weight.T).sigmoid() + module.e_score_correction_bias
            per = scores.shape[-1] // module.num_group
            group = scores.view(-1, module.num_group, per).topk(2, dim=-1)[0].sum(-1)
            keep = torch.zeros_like(group).scatter_(1, group.topk(module.topk_group, dim=-1)[1], 1)
            ranked_groups = group.topk(module.topk_group + 1, dim=-1)[0]
            margins.append(float((ranked_groups[:, -2] - ranked_groups[:, -1]).min()))
            scores = scores.masked_fill(~keep.repeat_interleave(per, 1).bool(), float("-inf"))
            ranked = scores.topk(k + 1, dim=-1)[0]
            margins.append(float((ranked[:, k - 1] - ranked[:, k]).min()))

        handle = layer.mlp.gate.register_forward_hook(hook)
        position_embeddings = model.model.rotary_emb(x[None], positions)
        hidden = layer(x[None], attention_mask=mask, position_ids=positions,
                       position_embeddings=position_embeddings)[0]
        handle.remove()
        hidden = hidden if hidden.dim() == 2 else hidden[0]
        logits = rms_norm(hidden, weights[prefix + "shared_head.norm.weight"], eps) @ \
            torch.from_numpy(weights[prefix + "shared_head.head.weight"]).T
    logits = logits.to(torch.float32).numpy()
    margin = min(margins)
    if margin < MIN_ROUTING_MARGIN:
        raise SystemExit(f"routing margin {margin} below {MIN_ROUTING_MARGIN}: the golden is fragile")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.mtp.logits").write_bytes(logits.astype("<f4").tobytes())
    manifest = {"config": NAME, "gguf": f"{NAME}.f32.gguf", "gguf_sha256": gguf_sha256,
                "tokens": ids, "positions": count, "vocab": config.vocab_size,
                "logits": f"{NAME}.mtp.logits", "routing_margin": margin,
                "max_abs_logit": float(np.abs(logits).max()),
                "tolerance": "max |delta| <= 1e-4 (f32 weights and cache)"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({k: v for k, v in manifest.items() if k != "tokens"}))


if __name__ == "__main__":
    main()
