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


def written_as_recorded(name: str, dtype: str, path: Path, sha256: str, reference: str) -> bool:
    """Writes tiny model `name` in `dtype` at `path`; False (and a line saying so) when its
    bytes are not the ones `reference` was computed from."""
    tiny_models.write_model(name, dtype, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        print(f"{path.name}: sha256 {digest} differs from {reference}'s {sha256} "
              f"(numpy or gguf version drift?)")
    return digest == sha256


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((ROOT / "tests/golden/logits/manifest.json").read_text())
    problems = 0
    for entry in manifest["entries"]:
        problems += not written_as_recorded(entry["config"], entry["dtype"], out / entry["gguf"],
                                            entry["gguf_sha256"], "the transformers goldens")
        tiny_models.write_hf_folder(entry["config"], entry["dtype"],
                                    out / tiny_models.hf_folder_name(entry["config"], entry["dtype"]))
    # The MoE / MLA files llama.cpp's logits were recorded on (tests/golden/llamacpp_moe).
    reference = json.loads((ROOT / "tests/golden/llamacpp_moe/manifest.json").read_text())
    for entry in reference["entries"]:
        problems += not written_as_recorded(entry["config"], entry["dtype"], out / entry["gguf"],
                                            entry["gguf_sha256"], "llama.cpp's reference")
    # The F32 model llama.cpp's K-quant quantization was recorded from (tests/golden/quantizers_k).
    k_quant = json.loads((ROOT / "tests/golden/quantizers_k/manifest.json").read_text())
    problems += not written_as_recorded(k_quant["model"], "f32",
                                        out / f"{k_quant['model']}.f32.gguf",
                                        k_quant["f32_gguf_sha256"], "the K-quant reference")
    # Block-scaled FP8 folders and their BF16 dequantizations (decoder_model_test compares).
    for name in ("llama_gqa", "qwen3_qknorm"):
        tiny_models.write_hf_fp8_folders(name, out / name)
        # Every matrix in Q8_0 by the gguf package (the --quantize q8_0 test's reference).
        tiny_models.write_model(name, "q8_0", out / f"{name}.q8_0.gguf")
    print(f"wrote {len(manifest['entries'])} tiny models to {out}, {problems} with a wrong sha256")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
