#!/usr/bin/env python3
"""tachyon's SentencePiece-style tokenizer (tokenizer.ggml.model = "llama") against Google's
`sentencepiece` library itself.

Trains a small BPE model with byte fallback (Llama's settings: identity normalization, dummy
prefix, extra whitespace kept, digits split) on the shared corpus, writes its pieces, scores and
types to a GGUF with the `gguf` package, and compares token ids over the generated corpus.
sentencepiece never matches control-token text, so tachyon runs with --no-special.
    .venv/bin/python tests/tokenizer/compare_sentencepiece.py --tachyon build/tachyon
"""
import argparse
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import sentencepiece

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from tokenizer_corpus import make_corpus  # noqa: E402

TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNUSED, TOKEN_TYPE_BYTE = 1, 2, 3, 5, 6


def train(shared: Path, vocab_size: int) -> sentencepiece.SentencePieceProcessor:
    text = (shared / "data/corpus/tinyshakespeare.txt").read_text()[:300_000]
    text += (shared / "data/corpus/gpl-3.0.txt").read_text()
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_writer=model, model_type="bpe",
        vocab_size=vocab_size, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, split_digits=True, character_coverage=0.9995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


def write_gguf(processor: sentencepiece.SentencePieceProcessor, path: Path) -> None:
    tokens, scores, types = [], [], []
    for i in range(processor.get_piece_size()):
        tokens.append(processor.id_to_piece(i))
        scores.append(processor.get_score(i))
        if processor.is_unknown(i):
            types.append(TOKEN_TYPE_UNKNOWN)
        elif processor.is_control(i):
            types.append(TOKEN_TYPE_CONTROL)
        elif processor.is_byte(i):
            types.append(TOKEN_TYPE_BYTE)
        elif processor.is_unused(i):
            types.append(TOKEN_TYPE_UNUSED)
        else:
            types.append(TOKEN_TYPE_NORMAL)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(processor.bos_id())
    writer.add_eos_token_id(processor.eos_id())
    writer.add_unk_token_id(processor.unk_id())
    writer.add_add_space_prefix(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run_jsonl(tachyon: str, args: list[str], lines: list, work: Path) -> list:
    path = work / "input.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = subprocess.run([tachyon, *args, "--jsonl", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tachyon {' '.join(args)} failed: {result.stderr.strip()}")
    # Not splitlines(): that also splits at U+2028 and U+0085 inside JSON strings.
    return [json.loads(line) for line in result.stdout.split("\n") if line]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--shared-dir", default=str(ROOT.parent / "shared"))
    args = parser.parse_args()
    started = time.time()

    processor = train(Path(args.shared_dir), vocab_size=2000)
    texts = [text for _, text in make_corpus()]
    with tempfile.TemporaryDirectory(prefix="tachyon-spm-") as work_dir:
        work = Path(work_dir)
        model = work / "spm.gguf"
        write_gguf(processor, model)
        got = run_jsonl(args.tachyon, ["tokenize", "-m", str(model), "--no-special"], texts, work)
        want = [processor.encode(text) for text in texts]
        mismatches = [(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
        byte_fallback = sum(1 for ids in want if any(processor.is_byte(i) for i in ids))

        decoded = run_jsonl(args.tachyon, ["detokenize", "-m", str(model)], want, work)
        want_decoded = [processor.decode(ids) for ids in want]
        decode_mismatches = [(t, w, g) for t, w, g in zip(texts, want_decoded, decoded) if w != g]

    for text, w, g in mismatches[:10]:
        print(f"  ids differ for {text[:60]!r}\n    sentencepiece {w[:16]}\n    tachyon       {g[:16]}")
    for text, w, g in decode_mismatches[:10]:
        print(f"  decode differs for {text[:60]!r}: sentencepiece {w[:60]!r}, tachyon {g[:60]!r}")
    print(f"tokenizer sentencepiece (bpe, {processor.get_piece_size()} pieces, byte fallback): "
          f"{len(texts)} strings compared, {len(texts) - len(mismatches)} identical ids "
          f"({byte_fallback} use byte tokens), {len(texts) - len(decode_mismatches)} identical "
          f"decodes ({time.time() - started:.1f} s)")
    ok = len(got) == len(texts) and not mismatches and not decode_mismatches
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
