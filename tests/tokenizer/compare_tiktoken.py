#!/usr/bin/env python3
"""Kimi-K2's tokenizer format against the reference `tiktoken` package: a model folder with
`tiktoken.model` (base64 bytes and rank per line) and Kimi's tokenizer_config.json
(added_tokens_decoder naming some of the 256 ids reserved after the ranks) must give, for every
string of the project's tokenizer corpus, the ids tiktoken.Encoding gives with Kimi-K2's split
pattern (tokenization_kimi.py's, with its `&&` class intersection) and those special tokens.
Kimi's own 163,584 ranks are not on PyPI; the ranks here are SmolLM2's byte-level BPE
(../shared/data/tokenizers/smollm-135m) in tiktoken's form: the 256 bytes, then each merge's
result in merge order. Also: decoding gives the text back, and broken files get one clear error.

    .venv/bin/python tests/tokenizer/compare_tiktoken.py --tachyon build/tachyon --shared-dir ../shared
"""
import argparse
import base64
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tiktoken

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests/api"))
import tiny_models  # noqa: E402
from checks import check, exit_status  # noqa: E402
from tokenizer_corpus import make_corpus  # noqa: E402

# tokenization_kimi.py's pat_str (fancy-regex syntax, as tiktoken takes it).
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# Kimi-K2's named special tokens, by offset from the first reserved id.
KIMI_SPECIAL = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
                17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]"}


def byte_decoder() -> dict[str, int]:
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + extra)] = byte
            extra += 1
    return table


def smollm_ranks(shared: Path) -> dict[bytes, int]:
    decode = byte_decoder()
    ranks = {bytes([b]): b for b in range(256)}
    lines = (shared / "data/tokenizers/smollm-135m/merges.txt").read_text(encoding="utf-8").split("\n")
    for line in lines:
        if not line or line.startswith("#version"):
            continue
        left, right = line.split(" ")
        token = bytes(decode[c] for c in left + right)
        if token not in ranks:
            ranks[token] = len(ranks)
    return ranks


def write_folder(base: Path, folder: Path, ranks: dict[bytes, int]) -> dict[str, int]:
    shutil.copytree(base, folder)
    (folder / "tokenizer.json").unlink()
    with open(folder / "tiktoken.model", "w") as out:
        for token, rank in ranks.items():
            out.write(f"{base64.b64encode(token).decode()} {rank}\n")
    first = len(ranks)
    config = {
        "added_tokens_decoder": {str(first + offset): {"content": text, "lstrip": False,
                                                       "normalized": False, "rstrip": False,
                                                       "single_word": False, "special": True}
                                 for offset, text in KIMI_SPECIAL.items()},
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "tokenizer_class": "TikTokenTokenizer", "chat_template": tiny_models.HF_CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return {KIMI_SPECIAL.get(i - first, f"<|reserved_token_{i}|>"): i
            for i in range(first, first + 256)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build/tachyon"))
    parser.add_argument("--shared-dir", default=str(ROOT.parent / "shared"))
    args = parser.parse_args()
    shared = Path(args.shared_dir)
    ranks = smollm_ranks(shared)
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        base = tiny_models.write_hf_folder("kimi_k2_tiny", "f32", scratch / "base")
        folder = scratch / "kimi"
        special = write_folder(base, folder, ranks)
        reference = tiktoken.Encoding(name="kimi-k2-test", pat_str=KIMI_PATTERN,
                                      mergeable_ranks=ranks, special_tokens=special)
        corpus = [text for _, text in make_corpus(shared)]
        reserved = f"<|reserved_token_{len(ranks) + 5}|>"  # an id Kimi leaves unnamed
        corpus += ["[BOS]<|im_user|>user<|im_middle|>Hi 你好世界 HELLOWorld's<|im_end|>[EOS]",
                   f"{reserved} and <|reserved_token_1|>"]
        jsonl = scratch / "corpus.jsonl"
        jsonl.write_text("".join(json.dumps(text) + "\n" for text in corpus))
        result = subprocess.run([args.tachyon, "tokenize", "-m", str(folder), "--jsonl", str(jsonl)],
                                capture_output=True, text=True, timeout=600)
        check("tokenize -m KIMI-DIR runs", result.returncode == 0, result.stderr[-500:])
        ours = [json.loads(line) for line in result.stdout.splitlines()]
        theirs = [reference.encode(text, allowed_special="all") for text in corpus]
        differing = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
        check(f"{len(corpus)} corpus strings: token ids == tiktoken's",
              len(ours) == len(corpus) and not differing,
              f"{len(differing)} differ; first: {corpus[differing[0]]!r}: ours "
              f"{ours[differing[0]][:20]} tiktoken {theirs[differing[0]][:20]}" if differing
              else f"{len(ours)} results")
        check("the reserved ids get Kimi's names and reserved_token_<id>",
              theirs[-1][0] == special[reserved] and ours[-1] == theirs[-1],
              f"{ours[-1]} vs {theirs[-1]}")
        # Decoding: the text back, for strings tiktoken itself round-trips.
        samples = [(text, ids) for text, ids in zip(corpus, theirs)
                   if reference.decode(ids) == text][:200]
        ids_file = scratch / "ids.jsonl"
        ids_file.write_text("".join(json.dumps(ids) + "\n" for _, ids in samples))
        decoded = subprocess.run([args.tachyon, "detokenize", "-m", str(folder), "--jsonl",
                                  str(ids_file)], capture_output=True, text=True, timeout=300)
        texts = [json.loads(line) for line in decoded.stdout.splitlines()]
        check(f"detokenize gives {len(samples)} texts back",
              texts == [text for text, _ in samples],
              f"{decoded.stderr.strip()[:200]} {len(texts)} results")

        # Broken files: one clear error each.
        def expect_error(what: str, expected: str) -> None:
            result = subprocess.run([args.tachyon, "tokenize", "-m", str(folder), "-p", "x"],
                                    capture_output=True, text=True, timeout=120)
            lines = result.stderr.splitlines()
            check(what, result.returncode == 1 and len(lines) == 1 and expected in lines[0],
                  f"exit {result.returncode}, stderr {result.stderr!r}")

        model = (folder / "tiktoken.model").read_text()
        (folder / "tiktoken.model").write_text(model.replace(" 300\n", " 3oo\n", 1))
        expect_error("a rank that is not a number", "tiktoken.model line 301 is not \"<base64> <rank>\"")
        (folder / "tiktoken.model").write_text(model.replace(" 300\n", " 301\n", 1))
        expect_error("a repeated rank", "tiktoken.model line 302 repeats rank 301")
        (folder / "tiktoken.model").write_text("QQ= 0\n" + model)
        expect_error("bad base64", "tiktoken.model line 1 is not \"<base64> <rank>\"")
        (folder / "tiktoken.model").write_text(model)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["added_tokens_decoder"]["7"] = {"content": "<|bad|>", "special": True}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        expect_error("an added token outside the reserved ids",
                     f"added token \"7\"")
        (folder / "tokenizer_config.json").unlink()
        expect_error("tiktoken.model without tokenizer_config.json",
                     "tiktoken.model without tokenizer_config.json")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
