#!/usr/bin/env python3
"""Test fixture: writes the tiny GGUF models of tools/tiny_models.py into OUT_DIR and checks each
file's SHA-256 against tests/golden/logits/manifest.json, so the golden logits (computed by HF
transformers from the same weights) really belong to these files. Also writes each model as a
Hugging Face folder (config.json + model.safetensors) beside its GGUF file, and two models as
block-scaled FP8 folders with their BF16 dequantizations."""
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import tiny_models  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((ROOT / "tests/golden/logits/manifest.json").read_text())
    problems = 0
    for entry in manifest["entries"]:
        path = tiny_models.write_model(entry["config"], entry["dtype"], out / entry["gguf"])
        tiny_models.write_hf_folder(entry["config"], entry["dtype"],
                                    out / tiny_models.hf_folder_name(entry["config"], entry["dtype"]))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != entry["gguf_sha256"]:
            print(f"{path.name}: sha256 {digest} differs from the manifest's {entry['gguf_sha256']} "
                  f"(numpy or gguf version drift?)")
            problems += 1
    # The MoE / MLA files llama.cpp's logits were recorded on (tests/golden/llamacpp_moe).
    reference = json.loads((ROOT / "tests/golden/llamacpp_moe/manifest.json").read_text())
    for entry in reference["entries"]:
        path = out / entry["gguf"]
        tiny_models.write_model(entry["config"], entry["dtype"], path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != entry["gguf_sha256"]:
            print(f"{path.name}: sha256 {digest} differs from llama.cpp's reference "
                  f"{entry['gguf_sha256']}")
            problems += 1
    # The F32 model llama.cpp's K-quant quantization was recorded from (tests/golden/quantizers_k).
    k_quant = json.loads((ROOT / "tests/golden/quantizers_k/manifest.json").read_text())
    path = tiny_models.write_model(k_quant["model"], "f32", out / f"{k_quant['model']}.f32.gguf")
    if hashlib.sha256(path.read_bytes()).hexdigest() != k_quant["f32_gguf_sha256"]:
        print(f"{path.name}: sha256 differs from the K-quant reference's")
        problems += 1
    # Block-scaled FP8 folders and their BF16 dequantizations (decoder_model_test compares).
    for name in ("llama_gqa", "qwen3_qknorm"):
        tiny_models.write_hf_fp8_folders(name, out / name)
        # Every matrix in Q8_0 by the gguf package (the --quantize q8_0 test's reference).
        tiny_models.write_model(name, "q8_0", out / f"{name}.q8_0.gguf")
    print(f"wrote {len(manifest['entries'])} tiny models to {out}, {problems} with a wrong sha256")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
