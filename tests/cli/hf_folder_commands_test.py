#!/usr/bin/env python3
"""`-m DIR` with a Hugging Face model folder, end to end: every tiny model of tools/tiny_models.py
written as a folder (config.json + model.safetensors by the PyPI safetensors package,
tokenizer.json by the PyPI tokenizers package, tokenizer_config.json) gives what its GGUF file
gives: the same token ids from `tokenize` and the same greedy tokens from `generate`; `info`
describes the folder; `template` and `serve` use tokenizer_config.json's chat template; a
block-scaled FP8 folder gives what its BF16 dequantization gives; and each broken folder gets
one clear error line.
    .venv/bin/python tests/cli/hf_folder_commands_test.py --tachyon build/tachyon
"""
import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests/api"))
import tiny_models  # noqa: E402
from checks import check, exit_status  # noqa: E402


def run(tachyon: str, *argv: str, timeout: int = 120):
    return subprocess.run([tachyon, *argv], capture_output=True, text=True, timeout=timeout)


def expect_error(tachyon: str, what: str, argv: list[str], expected_part: str) -> None:
    result = run(tachyon, *argv)
    lines = result.stderr.splitlines()
    check(what, result.returncode == 1 and len(lines) == 1 and expected_part in lines[0]
          and result.stdout == "",
          f"exit {result.returncode}, stderr {result.stderr!r}, expected {expected_part!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_serve(tachyon: str, folder: Path, kv_bytes_per_token: int | None = None) -> None:
    port = free_port()
    server = subprocess.Popen([tachyon, "serve", "-m", str(folder), "--port", str(port), "-t", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        body = json.dumps({"model": folder.name, "max_tokens": 4, "temperature": 0,
                           "messages": [{"role": "user", "content": "the and of"}]}).encode()
        request = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
        usage = answer.get("usage", {})
        # "<|bos|><user>the and of<assistant>": 1 + 3 + ... tokens through the folder's template.
        check("serve -m DIR answers a chat completion through tokenizer_config.json's template",
              answer["choices"][0]["message"]["role"] == "assistant"
              and usage.get("completion_tokens") == 4 and usage.get("prompt_tokens", 0) > 5,
              json.dumps(answer)[:300])
        with urllib.request.urlopen(base + "/v1/models", timeout=5) as response:
            models = [m["id"] for m in json.load(response)["data"]]
        check("serve -m DIR names the model after the folder", models == [folder.name],
              str(models))
        if kv_bytes_per_token is not None:
            with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
                metrics = response.read().decode()
            line = f'tachyon:kv_cache_bytes_per_token{{model_name="{folder.name}"}} {kv_bytes_per_token}'
            check(f"{folder.name}: /metrics reports the KV bytes per token", line in metrics,
                  [m for m in metrics.splitlines() if "bytes_per_token" in m])
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    args = parser.parse_args()
    t = args.tachyon
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for config in tiny_models.CONFIGS:
            dtype = "f16" if "f16" in config.dtypes and config.name.startswith("qwen") else "f32"
            gguf_path = tiny_models.write_model(config.name, dtype, scratch / f"{config.name}.gguf")
            folder = tiny_models.write_hf_folder(config.name, dtype, scratch / config.name)
            text = "<|bos|>the and of 12345, with them!"
            ids = [run(t, "tokenize", "-m", str(p), "-p", text).stdout for p in (gguf_path, folder)]
            check(f"{config.name}: tokenize -m DIR == -m GGUF", ids[0] == ids[1] and ids[0] != "",
                  f"{ids}")
            outputs = []
            for path in (gguf_path, folder):
                result = run(t, "generate", "-m", str(path), "-p", "the and of", "-n", "16",
                             "--temperature", "0", "--ignore-eos", "--json", "-t", "2")
                outputs.append(json.loads(result.stdout)["completion_ids"]
                               if result.returncode == 0 else result.stderr)
            check(f"{config.name}: generate -m DIR == -m GGUF (greedy, 16 tokens)",
                  outputs[0] == outputs[1] and isinstance(outputs[0], list), f"{outputs}")

        folder = scratch / "llama3_rope"
        info = json.loads(run(t, "info", "-m", str(folder), "--json").stdout)
        check("info -m DIR --json", info.get("format") == "huggingface"
              and info.get("architecture") == "llama" and info.get("vocabulary_size") == 300
              and info.get("tensor_types") == {"F32": 21}, json.dumps(info))
        text_info = run(t, "info", "-m", str(folder)).stdout
        check("info -m DIR", "Hugging Face folder, 1 safetensors shard(s)" in text_info
              and "architecture   llama, 2 layers" in text_info, text_info)
        messages = scratch / "messages.json"
        messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
        rendered = run(t, "template", "-m", str(folder), "--messages", str(messages),
                       "--add-generation-prompt").stdout
        check("template -m DIR renders tokenizer_config.json's template",
              rendered == "<|bos|><user>hi<assistant>", repr(rendered))
        check_serve(t, folder)

        # MLA + MoE (a tiny Kimi-K2 shape): info describes both, serve answers and reports
        # the latent cache's bytes per token (3 layers x one latent of 40 values x f16).
        kimi = scratch / "kimi_k2_tiny"
        info = json.loads(run(t, "info", "-m", str(kimi), "--json").stdout)
        check("info -m DIR --json describes MLA and the experts",
              info.get("architecture") == "deepseek2" and info.get("mla", {}).get("kv_lora_rank") == 32
              and info.get("moe", {}).get("experts") == 16
              and info.get("moe", {}).get("scoring") == "sigmoid"
              and info.get("kv_bytes_per_token") == 240, json.dumps(info))
        check_serve(t, kimi, kv_bytes_per_token=240)
        text = scratch / "text.txt"
        text.write_text("the and of " * 60)
        ppl = [run(t, "perplexity", "-m", str(path), "-f", str(text), "--ctx", "32", "--json",
                   "-t", "2") for path in (kimi, scratch / "kimi_k2_tiny.gguf")]
        check("perplexity -m MLA/MoE DIR == -m GGUF", all(r.returncode == 0 for r in ppl)
              and json.loads(ppl[0].stdout)["perplexity"] == json.loads(ppl[1].stdout)["perplexity"],
              [r.stdout[:200] + r.stderr[-200:] for r in ppl])
        bench = run(t, "bench", "-m", str(kimi), "-p", "16", "-n", "4", "-r", "1", "--no-roofline",
                    "--json", "-t", "2")
        check("bench -m MLA/MoE DIR", bench.returncode == 0 and "tg4" in bench.stdout,
              bench.stdout[:300] + bench.stderr[-300:])
        chat = subprocess.run([t, "chat", "-m", str(kimi), "--temperature", "0", "-n", "4", "-t", "2"],
                              input="hello\n", capture_output=True, text=True, timeout=120)
        check("chat -m MLA/MoE DIR answers through the folder's template", chat.returncode == 0,
              chat.stderr[-300:])

        # Broken folders: one clear line each.
        broken = scratch / "broken"
        shutil.copytree(folder, broken)
        (broken / "tokenizer.json").unlink()
        expect_error(t, "a folder without tokenizer.json", ["tokenize", "-m", str(broken), "-p", "x"],
                     f"{broken}: no tokenizer.json")
        shutil.copy(folder / "tokenizer.json", broken)
        (broken / "model.safetensors").unlink()
        expect_error(t, "a folder without weights", ["generate", "-m", str(broken), "-p", "x"],
                     "neither model.safetensors nor model.safetensors.index.json")
        shutil.copy(folder / "model.safetensors", broken)
        data = (broken / "model.safetensors").read_bytes()
        (broken / "model.safetensors").write_bytes(data[: len(data) - 100])
        expect_error(t, "a truncated safetensors file", ["generate", "-m", str(broken), "-p", "x"],
                     "run past the end of the data section")
        (broken / "model.safetensors").write_bytes(data)
        config = json.loads((broken / "config.json").read_text())
        config["num_hidden_layers"] = 3
        (broken / "config.json").write_text(json.dumps(config))
        expect_error(t, "a config whose numbers disagree with the tensors",
                     ["generate", "-m", str(broken), "-p", "x"],
                     "tensor 'model.layers.2.input_layernorm.weight' is missing from")
        (broken / "config.json").unlink()
        expect_error(t, "a folder without config.json", ["info", "-m", str(broken)],
                     "no config.json (not a Hugging Face model folder)")

        # --quantize q8_0 at load: the model the gguf package's quantizer makes.
        q8_file = tiny_models.write_model("llama3_rope", "q8_0", scratch / "llama3_rope.q8_0.gguf")
        outputs = [run(t, "generate", "-m", *argv, "-p", "the and of", "-n", "16",
                       "--temperature", "0", "--ignore-eos", "--json", "-t", "2").stdout
                   for argv in ([str(q8_file)], [str(folder), "--quantize", "q8_0"])]
        check("generate -m DIR --quantize q8_0 == the gguf package's Q8_0 file",
              outputs[0] != "" and json.loads(outputs[0])["completion_ids"]
              == json.loads(outputs[1])["completion_ids"], f"{outputs}")
        bad = run(t, "generate", "-m", str(folder), "--quantize", "q3_k", "-p", "x")
        check("--quantize names the types it takes", bad.returncode != 0
              and "q4_0" in bad.stderr and "q8_0" in bad.stderr, bad.stderr)

        # Block-scaled FP8: the same greedy tokens as its BF16 dequantization; a block size
        # that does not fit the scale tensors is one clear error.
        fp8, bf16 = tiny_models.write_hf_fp8_folders("llama_gqa", scratch / "fp8")
        outputs = [run(t, "generate", "-m", str(folder), "-p", "the and of", "-n", "16",
                       "--temperature", "0", "--ignore-eos", "--json", "-t", "2").stdout
                   for folder in (fp8, bf16)]
        check("generate -m FP8-DIR == its BF16 dequantization",
              outputs[0] != "" and json.loads(outputs[0])["completion_ids"]
              == json.loads(outputs[1])["completion_ids"], f"{outputs}")
        config = json.loads((fp8 / "config.json").read_text())
        config["quantization_config"]["weight_block_size"] = [16, 16]
        (fp8 / "config.json").write_text(json.dumps(config))
        expect_error(t, "FP8 scales that do not fit the block size",
                     ["generate", "-m", str(fp8), "-p", "x"],
                     "tensor 'model.layers.0.self_attn.q_proj.weight': FP8 weights of shape "
                     "[64, 64] in 16x16 blocks need a scale of shape [4, 4], got [2, 2]")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
