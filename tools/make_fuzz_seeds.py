#!/usr/bin/env python3
"""Writes small GGUF seed files for the libFuzzer targets: tiny byte-level BPE and SentencePiece
vocabularies, so fuzzing reaches the tokenizers as well as the reader.

    .venv/bin/python tools/make_fuzz_seeds.py fuzz/seeds/fuzz_gguf_reader
"""
import sys
from pathlib import Path

import gguf


def byte_level_alphabet() -> list[str]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = [], 0
    for byte in range(256):
        if byte in printable:
            chars.append(chr(byte))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write(path: Path, model: str, pre: str | None, tokens, types, merges=None, scores=None) -> None:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(model)
    if pre:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if merges:
        writer.add_token_merges(merges)
    if scores:
        writer.add_token_scores(scores)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz/seeds/fuzz_gguf_reader")
    out.mkdir(parents=True, exist_ok=True)

    alphabet = byte_level_alphabet()
    merges = ["H e", "l l", "He ll", "Ġ w", "o r", "Ġw or", "Hell o"]
    tokens = ["<|im_start|>", "<|im_end|>"] + alphabet + ["He", "ll", "Hell", "Ġw", "or", "Ġwor", "Hello"]
    types = [3, 3] + [1] * (len(tokens) - 2)
    for pre in ["smollm", "llama-bpe", "deepseek-v3", "kimi-k2"]:
        write(out / f"bpe_{pre}.gguf", "gpt2", pre, tokens, types, merges=merges)

    spm_tokens = ["<s>", "</s>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + [
        "\u2581", "H", "e", "l", "o", "\u2581H", "ll", "\u2581He", "llo", "\u2581Hello"]
    spm_types = [3, 3, 2] + [6] * 256 + [1] * 10
    spm_scores = [0.0] * 259 + [-1.0, -2.0, -2.0, -2.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
    write(out / "spm.gguf", "llama", None, spm_tokens, spm_types, scores=spm_scores)
    print(f"wrote seeds to {out}")


if __name__ == "__main__":
    main()
