#!/usr/bin/env python3
"""Independent reference check of tachyon's tokenizers against Hugging Face `tokenizers`.

Sections (all run; the exit status is non-zero if any fails):
  vocab    the default model's GGUF vocabulary, merges and special tokens equal the published
           SmolLM tokenizer files (read with the PyPI `gguf` package).
  smollm   token ids of every corpus string, tachyon vs HF, with special-token text parsed
           (default) and not parsed (--no-special), plus decode(encode(s)) == s round trips
           through `tachyon detokenize`, compared with HF's decode too.
  pre      byte-level BPE with the GPT-2 vocabulary under each `tokenizer.ggml.pre`
           (gpt2, llama-bpe, qwen2, deepseek-v3, kimi-k2, smollm), GGUF files written here at
           test time, each against an HF tokenizer with that family's pre-tokenizer; and an
           unknown pre name must make tachyon fail with one clear error line.
  spm      a SentencePiece-style (`tokenizer.ggml.model = llama`) BPE with byte fallback, trained
           here at test time with HF `tokenizers`, written as a GGUF with scores.

Usage:
  compare_hf_tokenizer.py --tachyon build/tachyon --shared-dir ../shared [--model M.gguf]
                          [--only vocab,smollm,pre,spm] [--show N] [--dump-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))

import tiny_models  # noqa: E402
from tokenizer_corpus import make_corpus  # noqa: E402

try:
    import gguf  # noqa: E402
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
        trainers  # noqa: E402
except ImportError as e:  # pragma: no cover
    print(f"compare_hf_tokenizer: missing Python package ({e}); install tools/requirements-test.txt",
          file=sys.stderr)
    sys.exit(2)

TACHYON_TIMEOUT_S = 120

# ---------------------------------------------------------------------------------------------
# Pre-tokenizer regexes as the models' Hugging Face tokenizer.json / tokenization files give them
# (the Oniguruma syntax HF `tokenizers` uses; llama.cpp rewrites some of these for its engine).
# ---------------------------------------------------------------------------------------------
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
DEEPSEEK3_PATTERNS = [
    r"""\p{N}{1,3}""",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",  # [一-龥぀-ゟ゠-ヿ]+
    (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
     r"""| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""),
]
KIMI_K2_PATTERN = (
    r"""[\p{Han}]+"""
    r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
    r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
    r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# Special tokens added to the GPT-2 vocabulary for the pre-tokenizer GGUFs (control type).
GPT2_EXTRA_SPECIAL = ["<|im_start|>", "<|im_end|>"]
# Normal tokens added after them that no merge sequence reaches (GPT-2 BPE splits " tachyon" into
# " t", "ach", "yon"): only a tokenizer with ignore_merges (Llama 3: HF `ignore_merges: true`, llama.cpp
# `ignore_merges = true` for llama-bpe) emits them, when a whole pre-token equals one of them.
GPT2_EXTRA_NORMAL = ["\u0120tachyon", "\u0120tokenizer", "tachyon", "\u0120" * 8]

TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED, TOKEN_TYPE_BYTE = 1, 2, 3, 4, 6


class CheckFailed(Exception):
    pass


class TachyonError(Exception):
    def __init__(self, message: str, returncode: int | None = None, stderr: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


# ---------------------------------------------------------------------------------------------
# tachyon runner
# ---------------------------------------------------------------------------------------------
class Tachyon:
    def __init__(self, exe: str, work_dir: Path):
        self.exe = exe
        self.work_dir = work_dir
        self.calls = 0

    def run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        self.calls += 1
        try:
            proc = subprocess.run([self.exe] + args, capture_output=True, timeout=TACHYON_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise TachyonError(f"`tachyon {' '.join(args)}` ran past {TACHYON_TIMEOUT_S} s")
        if check and proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()
            raise TachyonError(f"`tachyon {' '.join(args)}` exited {proc.returncode}: {err[-2000:]}",
                               proc.returncode, err)
        return proc

    def _jsonl(self, command: str, model: Path, lines: list, extra: list[str], tag: str) -> list:
        in_path = self.work_dir / f"{tag}.in.jsonl"
        with open(in_path, "w", encoding="utf-8", newline="\n") as f:
            for item in lines:
                f.write(json.dumps(item, ensure_ascii=False) + "\n")
        proc = self.run([command, "-m", str(model), "--jsonl", str(in_path)] + extra)
        raw = proc.stdout
        # Split on b"\n" only: the JSON text may hold U+2028 / U+0085 raw, which str.splitlines() would split on.
        out_lines = raw.split(b"\n")
        if out_lines and out_lines[-1] == b"":
            out_lines.pop()
        if len(out_lines) != len(lines):
            raise TachyonError(f"`tachyon {command} --jsonl` ({tag}): {len(lines)} input lines but "
                               f"{len(out_lines)} output lines")
        result = []
        for i, line in enumerate(out_lines):
            try:
                result.append(json.loads(line.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise TachyonError(f"`tachyon {command} --jsonl` ({tag}): output line {i + 1} is not JSON "
                                   f"({e}): {line[:200]!r}")
        return result

    def tokenize(self, model: Path, texts: list[str], extra: list[str] | None = None, tag: str = "tok") -> list:
        out = self._jsonl("tokenize", model, texts, extra or [], tag)
        for i, ids in enumerate(out):
            if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
                raise TachyonError(f"tokenize ({tag}) line {i + 1}: expected a JSON array of ints, got {ids!r:.200}")
        return out

    def detokenize(self, model: Path, id_lists: list[list[int]], tag: str = "detok") -> list:
        out = self._jsonl("detokenize", model, id_lists, [], tag)
        for i, s in enumerate(out):
            if not isinstance(s, str):
                raise TachyonError(f"detokenize ({tag}) line {i + 1}: expected a JSON string, got {s!r:.200}")
        return out


# ---------------------------------------------------------------------------------------------
# reporting helpers
# ---------------------------------------------------------------------------------------------
def short_repr(s: str, limit: int = 160) -> str:
    r = repr(s)
    return r if len(r) <= limit else r[:limit] + f"...(+{len(r) - limit} chars)"


def token_texts(tok: Tokenizer, ids: list[int], limit: int = 40) -> str:
    parts = []
    for i in ids[:limit]:
        t = tok.id_to_token(i) if isinstance(i, int) and i >= 0 else None
        parts.append(repr(t) if t is not None else f"<?{i}>")
    more = f" ...(+{len(ids) - limit})" if len(ids) > limit else ""
    return "[" + ", ".join(parts) + "]" + more


def first_diff(a: list, b: list) -> int:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return min(len(a), len(b))


def window(ids: list[int], k: int, before: int = 3, after: int = 6) -> tuple[int, list[int]]:
    lo = max(0, k - before)
    return lo, ids[lo:k + after]


class Mismatches:
    def __init__(self, title: str, show: int):
        self.title = title
        self.show = show
        self.items = []
        self.by_category: dict[str, int] = {}

    def add(self, category: str, text: str, hf_ids, ty_ids, tok: Tokenizer | None, note: str = ""):
        self.items.append((category, text, hf_ids, ty_ids, note))
        self.by_category[category] = self.by_category.get(category, 0) + 1
        if len(self.items) <= self.show:
            print(f"  --- {self.title} mismatch #{len(self.items)} [{category}] {short_repr(text)}")
            if note:
                print(f"      {note}")
            if isinstance(hf_ids, list) and isinstance(ty_ids, list) and tok is not None:
                k = first_diff(hf_ids, ty_ids)
                lo, hw = window(hf_ids, k)
                _, tw = window(ty_ids, k)
                print(f"      lengths hf={len(hf_ids)} tachyon={len(ty_ids)}, first difference at token {k}")
                print(f"      hf      [{lo}:] {hw} {token_texts(tok, hw)}")
                print(f"      tachyon [{lo}:] {tw} {token_texts(tok, tw)}")
            else:
                print(f"      expected {short_repr(str(hf_ids))}")
                print(f"      tachyon  {short_repr(str(ty_ids))}")

    def summary(self) -> str:
        if not self.items:
            return ""
        cats = ", ".join(f"{c}={n}" for c, n in sorted(self.by_category.items(), key=lambda kv: -kv[1]))
        return f"{self.title}: {len(self.items)} mismatches by category: {cats}"


def dump(dump_dir: Path | None, name: str, mism: Mismatches, tok: Tokenizer | None):
    if dump_dir is None or not mism.items:
        return
    dump_dir.mkdir(parents=True, exist_ok=True)
    with open(dump_dir / f"{name}.jsonl", "w", encoding="utf-8") as f:
        for category, text, hf_ids, ty_ids, note in mism.items:
            rec = {"category": category, "text": text, "hf": hf_ids, "tachyon": ty_ids, "note": note}
            if tok is not None and isinstance(hf_ids, list) and isinstance(ty_ids, list):
                rec["hf_tokens"] = [tok.id_to_token(i) for i in hf_ids]
                rec["tachyon_tokens"] = [tok.id_to_token(i) if isinstance(i, int) and i >= 0 else None
                                         for i in ty_ids]
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# section 1: vocabulary of the default model
# ---------------------------------------------------------------------------------------------
def gguf_field(reader: gguf.GGUFReader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    return field.contents()


def check_vocab(model: Path, smollm_dir: Path) -> None:
    reader = gguf.GGUFReader(str(model))
    problems = []
    tokens = gguf_field(reader, "tokenizer.ggml.tokens")
    merges = gguf_field(reader, "tokenizer.ggml.merges")
    types = gguf_field(reader, "tokenizer.ggml.token_type")
    if tokens is None or merges is None:
        raise CheckFailed(f"{model}: tokenizer.ggml.tokens or tokenizer.ggml.merges missing")

    vocab = json.loads((smollm_dir / "vocab.json").read_text(encoding="utf-8"))
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise CheckFailed("vocab.json ids are not 0..N-1")
    ref_tokens = [t for t, _ in by_id]
    if len(tokens) != len(ref_tokens):
        problems.append(f"token count: GGUF {len(tokens)}, vocab.json {len(ref_tokens)}")
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b]
    for i, a, b in diffs[:10]:
        problems.append(f"token id {i}: GGUF {a!r}, vocab.json {b!r}")
    if len(diffs) > 10:
        problems.append(f"... {len(diffs)} token ids differ in all")

    ref_merges = [ln for ln in (smollm_dir / "merges.txt").read_text(encoding="utf-8").split("\n")
                  if ln and not ln.startswith("#version")]
    if len(merges) != len(ref_merges):
        problems.append(f"merge count: GGUF {len(merges)}, merges.txt {len(ref_merges)}")
    mdiffs = [(i, a, b) for i, (a, b) in enumerate(zip(merges, ref_merges)) if a != b]
    for i, a, b in mdiffs[:10]:
        problems.append(f"merge rank {i}: GGUF {a!r}, merges.txt {b!r}")
    if len(mdiffs) > 10:
        problems.append(f"... {len(mdiffs)} merges differ in all")

    tj = json.loads((smollm_dir / "tokenizer.json").read_text(encoding="utf-8"))
    added = tj["added_tokens"]
    tj_vocab = tj["model"]["vocab"]
    if tj_vocab != vocab:
        problems.append("tokenizer.json model.vocab differs from vocab.json")
    tj_merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    if tj_merges != ref_merges:
        problems.append("tokenizer.json model.merges differs from merges.txt")
    for a in added:
        i, content = a["id"], a["content"]
        if i >= len(tokens) or tokens[i] != content:
            problems.append(f"added token {content!r} (id {i}) is {tokens[i] if i < len(tokens) else None!r} in GGUF")
        if types is not None and a.get("special") and types[i] != TOKEN_TYPE_CONTROL:
            problems.append(f"special token {content!r} (id {i}) has GGUF token_type {types[i]}, expected "
                            f"{TOKEN_TYPE_CONTROL} (control)")
    added_ids = {a["id"] for a in added}
    if types is not None:
        extra = [i for i, t in enumerate(types) if t in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
                 and i not in added_ids]
        if extra:
            problems.append(f"GGUF has {len(extra)} control/user-defined tokens that tokenizer.json does not add: "
                            f"{[tokens[i] for i in extra[:10]]}")
    bos = gguf_field(reader, "tokenizer.ggml.bos_token_id")
    eos = gguf_field(reader, "tokenizer.ggml.eos_token_id")
    pre = gguf_field(reader, "tokenizer.ggml.pre")
    tmodel = gguf_field(reader, "tokenizer.ggml.model")

    if problems:
        raise CheckFailed("vocabulary check failed:\n    " + "\n    ".join(problems))
    print(f"vocab: {model.name}: tokenizer.ggml.model={tmodel!r} pre={pre!r}; {len(tokens)} tokens equal "
          f"vocab.json id by id; {len(merges)} merges equal merges.txt in order; {len(added)} added tokens "
          f"({added[0]['content']!r} .. {added[-1]['content']!r}) match tokenizer.json ids and are control-type; "
          f"bos={bos} ({tokens[bos]!r}) eos={eos} ({tokens[eos]!r})")


# ---------------------------------------------------------------------------------------------
# generic id comparison
# ---------------------------------------------------------------------------------------------
def compare_ids(title: str, corpus: list[tuple[str, str]], hf_ids: list[list[int]], ty_ids: list[list[int]],
                tok: Tokenizer, show: int) -> Mismatches:
    mism = Mismatches(title, show)
    for (category, text), h, t in zip(corpus, hf_ids, ty_ids):
        if h != t:
            mism.add(category, text, h, t, tok)
    return mism


def hf_encode(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


# ---------------------------------------------------------------------------------------------
# section 2+3: SmolLM2 default model
# ---------------------------------------------------------------------------------------------
def check_smollm(ty: Tachyon, model: Path, smollm_dir: Path, corpus, show: int, dump_dir) -> list[str]:
    failures = []
    texts = [t for _, t in corpus]
    tok = Tokenizer.from_file(str(smollm_dir / "tokenizer.json"))

    t0 = time.time()
    hf = hf_encode(tok, texts)
    ty_ids = ty.tokenize(model, texts, tag="smollm")
    m1 = compare_ids("smollm ids", corpus, hf, ty_ids, tok, show)
    dump(dump_dir, "smollm_ids", m1, tok)

    tok_plain = Tokenizer.from_file(str(smollm_dir / "tokenizer.json"))
    tok_plain.encode_special_tokens = True  # special-token text is split like ordinary text
    hf_plain = hf_encode(tok_plain, texts)
    ty_plain = ty.tokenize(model, texts, ["--no-special"], tag="smollm_nospecial")
    m2 = compare_ids("smollm ids --no-special", corpus, hf_plain, ty_plain, tok, show)
    dump(dump_dir, "smollm_ids_nospecial", m2, tok)
    n_special_texts = sum(1 for a, b in zip(hf, hf_plain) if a != b)

    # Round trips: tachyon's ids (both modes) back through tachyon detokenize.
    # A string round-trips exactly unless the vocabulary cannot hold it: SmolLM's byte-level vocabulary
    # lacks 21 of the 256 byte symbols (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1-0xFF), which
    # HF (and llama.cpp) silently drop. Those strings are held to HF's decode instead.
    ref_lossy = [tok.decode(h, skip_special_tokens=False) != text for h, text in zip(hf + hf_plain, texts + texts)]
    decoded = ty.detokenize(model, ty_ids + ty_plain, tag="smollm_detok")
    m3 = Mismatches("smollm round trip", show)
    m4 = Mismatches("smollm decode vs HF decode", show)
    exact = 0
    for idx, ids in enumerate(ty_ids + ty_plain):
        category, text = corpus[idx % len(corpus)]
        got = decoded[idx]
        mode = "default" if idx < len(corpus) else "--no-special"
        if got == text:
            exact += 1 if idx < len(corpus) else 0
        elif not ref_lossy[idx]:
            m3.add(category, text, text, got, None, note=f"ids from `tokenize` ({mode}): {ids[:30]}")
        if all(0 <= i < tok.get_vocab_size() for i in ids):
            hf_text = tok.decode(ids, skip_special_tokens=False)
            if hf_text != got:
                m4.add(category, text, hf_text, got, None, note=f"ids from `tokenize` ({mode}): {ids[:30]}")
        else:
            m4.add(category, text, "(ids in range)", got, None, note=f"ids out of range: {ids[:30]}")
    n_lossy = sum(ref_lossy[:len(corpus)])
    dump(dump_dir, "smollm_roundtrip", m3, None)
    dump(dump_dir, "smollm_decode_vs_hf", m4, None)

    # Decoding id sequences no text produced: every token alone (partial UTF-8 byte sequences included)
    # and random sequences. Text that is not valid UTF-8 must come back as HF's lossy decode gives it.
    m6 = check_arbitrary_decode(ty, model, tok, "smollm", show)

    # --add-special: this model's GGUF says add_bos_token = false and HF's tokenizer.json has no
    # post-processor, so nothing may be added.
    sample = texts[:200]
    ty_add = ty.tokenize(model, sample, ["--add-special"], tag="smollm_addspecial")
    hf_add = [e.ids for e in tok.encode_batch(sample, add_special_tokens=True)]
    m5 = compare_ids("smollm ids --add-special", corpus[:200], hf_add, ty_add, tok, show)

    n = len(corpus)
    identical = n - len(m1.items)
    print(f"tokenizer smollm: {n} strings compared, {identical} identical, {exact} round-trips exact")
    print(f"  ({n_lossy} strings hold bytes this vocabulary cannot encode; HF drops them too, so those are "
          f"compared with HF's decode only)")
    print(f"  --no-special: {n - len(m2.items)}/{n} identical ({n_special_texts} strings tokenize differently "
          f"with special-token text unparsed); detokenize of both id sets: {2 * n - len(m3.items)}/{2 * n} "
          f"exact or lossy in HF too, "
          f"{2 * n - len(m4.items)}/{2 * n} equal to HF decode; --add-special: {200 - len(m5.items)}/200 identical "
          f"({time.time() - t0:.1f} s)")
    for m in (m1, m2, m3, m4, m5, m6):
        if m.items:
            failures.append(m.summary())
    return failures


def check_arbitrary_decode(ty: Tachyon, model: Path, tok: Tokenizer, name: str, show: int,
                           byte_stream_decode=None) -> Mismatches:
    """Decodes every token alone and 1000 random id sequences; compares with HF's decode.

    byte_stream_decode(ids) -> str, when given, is a second accepted answer: the pieces' bytes joined and
    then decoded with U+FFFD for each maximal invalid subpart (as llama.cpp's byte concatenation followed
    by a lossy UTF-8 conversion would give). Matches that only it accepts are counted and printed.
    """
    import random
    rng = random.Random(1234)
    n_vocab = tok.get_vocab_size()
    id_lists = [[i] for i in range(n_vocab)]
    kinds = ["single_token"] * n_vocab
    for _ in range(1000):
        id_lists.append([rng.randrange(n_vocab) for _ in range(rng.randrange(1, 16))])
        kinds.append("random_ids")
    # Ill-formed UTF-8 made of single-byte tokens, alone and between letters: truncated sequences,
    # stray continuation bytes, surrogates, overlongs, values past U+10FFFF.
    n_crafted = 0
    letter = tok.token_to_id("a")
    for seq in INVALID_UTF8:
        ids = [byte_token_id(tok, b) for b in seq]
        if None in ids or letter is None:
            continue
        for wrapped in (ids, ids + [letter], [letter] + ids + [letter], ids + ids):
            id_lists.append(wrapped)
            kinds.append("ill_formed_utf8")
            n_crafted += 1
    decoded = ty.detokenize(model, id_lists, tag=f"{name}_decode_any")
    m = Mismatches(f"{name} decode of arbitrary ids vs HF decode", show)
    only_byte_stream = 0
    example = None
    for ids, got, kind in zip(id_lists, decoded, kinds):
        want = tok.decode(ids, skip_special_tokens=False)
        if got == want:
            continue
        if byte_stream_decode is not None and got == byte_stream_decode(ids):
            only_byte_stream += 1
            example = example or (ids, want, got)
            continue
        m.add(kind, want, want, got, None,
              note=f"ids {ids} tokens {token_texts(tok, ids)}")
    extra = ""
    if only_byte_stream:
        extra = (f"; {only_byte_stream} more equal the byte-stream decode only (HF's ByteFallback decoder makes "
                 f"every byte token of an invalid run U+FFFD, valid ASCII bytes too; e.g. {token_texts(tok, example[0])}"
                 f" HF {example[1]!r:.60} tachyon {example[2]!r:.60})")
    print(f"  {name} decode of arbitrary ids: {n_vocab} single tokens + 1000 random + {n_crafted} ill-formed UTF-8 "
          f"sequences, "
          f"{len(id_lists) - len(m.items) - only_byte_stream}/{len(id_lists)} equal to HF decode{extra}")
    return m


INVALID_UTF8 = [b"\xe1\xb8", b"\xf0\x9f\x98", b"\xc3", b"\x80", b"\x80\x80", b"\xed\xa0\x80", b"\xc0\xaf",
                b"\xf4\x90\x80\x80", b"\xe0\x80\xaf", b"\xff", b"\xe2\x82", b"\xf0\x9f", b"\xc3\x28",
                b"\xe1\xb8\xe1\xb8\xbf", b"\xf0\x9f\x98\x80\x80"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_UNICODE = _bytes_to_unicode()


def byte_token_id(tok: Tokenizer, b: int):
    """The id of the token that is the single byte b: <0xXX> in a byte-fallback vocabulary, else the
    byte-level character; None when the vocabulary has neither."""
    i = tok.token_to_id(f"<0x{b:02X}>")
    return i if i is not None else tok.token_to_id(BYTE_TO_UNICODE[b])


def spm_byte_stream_decoder(tokens: list[str], types: list[int]):
    def decode(ids: list[int]) -> str:
        out = bytearray()
        for i in ids:
            if types[i] == TOKEN_TYPE_BYTE:
                out.append(int(tokens[i][3:5], 16))
            else:
                out += tokens[i].replace("\u2581", " ").encode("utf-8")
        text = out.decode("utf-8", "replace")
        return text[1:] if text.startswith(" ") else text
    return decode


# ---------------------------------------------------------------------------------------------
# section 5: other pre-tokenizers, GPT-2 vocabulary
# ---------------------------------------------------------------------------------------------
def byte_level(add_prefix_space=False, trim_offsets=True, use_regex=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, trim_offsets=trim_offsets,
                                    use_regex=use_regex)


def split_isolated(pattern: str):
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


def hf_pre_tokenizer(pre: str):
    """(pre_tokenizer, normalizer, ignore_merges) as the family's HF tokenizer.json configures them."""
    if pre == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True), None, False
    if pre == "llama-bpe":
        return pre_tokenizers.Sequence([split_isolated(LLAMA3_PATTERN), byte_level()]), None, True
    if pre == "qwen2":
        # Qwen2's tokenizer.json also puts text in NFC first; tachyon does the same for qwen2.
        return (pre_tokenizers.Sequence([split_isolated(QWEN2_PATTERN), byte_level(trim_offsets=False)]),
                normalizers.NFC(), False)
    if pre == "deepseek-v3":
        return pre_tokenizers.Sequence([split_isolated(p) for p in DEEPSEEK3_PATTERNS] + [byte_level()]), None, False
    if pre == "kimi-k2":
        return pre_tokenizers.Sequence([split_isolated(KIMI_K2_PATTERN), byte_level()]), None, False
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), None, False
    raise ValueError(pre)


def load_gpt2(gpt2_dir: Path):
    vocab = json.loads((gpt2_dir / "encoder.json").read_text(encoding="utf-8"))
    merges = [ln for ln in (gpt2_dir / "vocab.bpe").read_text(encoding="utf-8").split("\n")
              if ln and not ln.startswith("#version")]
    return vocab, merges


def build_gpt2_hf(vocab: dict, merges: list[str], pre: str) -> Tokenizer:
    pre_tok, normalizer, ignore_merges = hf_pre_tokenizer(pre)
    full_vocab = dict(vocab)
    for t in GPT2_EXTRA_SPECIAL + GPT2_EXTRA_NORMAL:
        full_vocab[t] = len(full_vocab)
    model = models.BPE(vocab=full_vocab, merges=[tuple(m.split(" ")) for m in merges], ignore_merges=ignore_merges)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tok
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)] +
                           [AddedToken(t, special=True, normalized=False) for t in GPT2_EXTRA_SPECIAL])
    assert [tok.token_to_id(t) for t in GPT2_EXTRA_NORMAL] == list(range(len(vocab) + len(GPT2_EXTRA_SPECIAL),
                                                                       len(vocab) + len(GPT2_EXTRA_SPECIAL) +
                                                                       len(GPT2_EXTRA_NORMAL)))
    return tok


def write_gguf(path: Path, *, model: str, tokens: list[str], types: list[int], pre: str | None = None,
               merges: list[str] | None = None, scores: list[float] | None = None, bos: int | None = None,
               eos: int | None = None, unk: int | None = None, add_space_prefix: bool | None = None,
               add_bos: bool | None = None) -> None:
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(f"tokenizer test ({model}, {pre})")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if unk is not None:
        w.add_unk_token_id(unk)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


PRE_TYPES = ["gpt2", "llama-bpe", "qwen2", "deepseek-v3", "kimi-k2", "smollm"]
# llama.cpp's other names for two of them (convert_hf_to_gguf writes "gpt-2"; "llama3" is an older name).
PRE_ALIASES = {"gpt-2": "gpt2", "llama3": "llama-bpe"}


def check_pre_types(ty: Tachyon, shared: Path, tmp: Path, corpus, show: int, dump_dir) -> list[str]:
    failures = []
    texts = [t for _, t in corpus]
    vocab, merges = load_gpt2(shared / "data" / "tokenizers" / "gpt2")
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    assert [i for _, i in by_id] == list(range(len(by_id)))
    tokens = [t for t, _ in by_id] + GPT2_EXTRA_SPECIAL + GPT2_EXTRA_NORMAL
    eot = vocab["<|endoftext|>"]
    types = [TOKEN_TYPE_NORMAL] * len(tokens)
    types[eot] = TOKEN_TYPE_CONTROL
    for t in GPT2_EXTRA_SPECIAL:
        types[tokens.index(t)] = TOKEN_TYPE_CONTROL
    for pre in PRE_TYPES:
        t0 = time.time()
        path = tmp / f"gpt2-{pre}.gguf"
        write_gguf(path, model="gpt2", pre=pre, tokens=tokens, types=types, merges=merges, bos=eot, eos=eot)
        tok = build_gpt2_hf(vocab, merges, pre)
        hf = hf_encode(tok, texts)
        try:
            ty_ids = ty.tokenize(path, texts, tag=f"pre_{pre}")
        except TachyonError as e:
            print(f"tokenizer pre={pre}: tachyon failed: {e}")
            failures.append(f"pre={pre}: tachyon failed: {str(e)[:300]}")
            continue
        m = compare_ids(f"pre={pre}", corpus, hf, ty_ids, tok, show)
        dump(dump_dir, f"pre_{pre}", m, tok)
        extra = ""
        if pre in ("gpt2", "llama-bpe", "qwen2"):  # plus a --no-special pass on the special-token strings
            sel = [i for i, (c, _) in enumerate(corpus) if c == "special"]
            tok.encode_special_tokens = True
            hf_p = hf_encode(tok, [texts[i] for i in sel])
            tok.encode_special_tokens = False
            ty_p = ty.tokenize(path, [texts[i] for i in sel], ["--no-special"], tag=f"pre_{pre}_nospecial")
            mp = compare_ids(f"pre={pre} --no-special", [corpus[i] for i in sel], hf_p, ty_p, tok, show)
            extra = f"; --no-special on {len(sel)} special-text strings: {len(sel) - len(mp.items)} identical"
            if mp.items:
                failures.append(mp.summary())
        print(f"tokenizer pre={pre}: {len(corpus)} strings compared, {len(corpus) - len(m.items)} identical{extra} "
              f"({time.time() - t0:.1f} s)")
        if m.items:
            failures.append(m.summary())

    # Aliases must tokenize exactly as the name they stand for.
    for alias, target in PRE_ALIASES.items():
        path = tmp / f"gpt2-{alias}.gguf"
        write_gguf(path, model="gpt2", pre=alias, tokens=tokens, types=types, merges=merges, bos=eot, eos=eot)
        tok = build_gpt2_hf(vocab, merges, target)
        hf = hf_encode(tok, texts)
        try:
            ty_ids = ty.tokenize(path, texts, tag=f"pre_{alias}")
        except TachyonError as e:
            print(f"tokenizer pre={alias} (alias of {target}): tachyon failed: {e}")
            failures.append(f"pre={alias}: tachyon failed: {str(e)[:300]}")
            continue
        m = compare_ids(f"pre={alias}", corpus, hf, ty_ids, tok, 0)
        print(f"tokenizer pre={alias} (alias of {target}): {len(corpus) - len(m.items)}/{len(corpus)} identical")
        if m.items:
            failures.append(m.summary())

    # An unknown pre-tokenizer name must fail cleanly.
    path = tmp / "gpt2-no-such-pre.gguf"
    write_gguf(path, model="gpt2", pre="no-such-pre", tokens=tokens, types=types, merges=merges, bos=eot, eos=eot)
    proc = ty.run(["tokenize", "-m", str(path), "-p", "hello world"], check=False)
    err_lines = [ln for ln in proc.stderr.decode("utf-8", "replace").split("\n") if ln.strip()]
    err_ok = [ln for ln in err_lines if ln.startswith("tachyon: error:")]
    ok = proc.returncode != 0 and len(err_ok) == 1 and "no-such-pre" in err_ok[0] and proc.stdout.strip() == b""
    print(f"tokenizer pre=no-such-pre: exit {proc.returncode}, stderr {err_lines!r:.300} -> "
          f"{'OK' if ok else 'FAILED'}")
    if not ok:
        failures.append("pre=no-such-pre: expected a non-zero exit, no stdout, and exactly one stderr line "
                        f"'tachyon: error: ...' naming 'no-such-pre'; got exit {proc.returncode}, stderr "
                        f"{err_lines!r:.300}, stdout {proc.stdout[:100]!r}")
    return failures


# ---------------------------------------------------------------------------------------------
# section 6: SentencePiece-style BPE with byte fallback
# ---------------------------------------------------------------------------------------------
SPM_SPECIAL = ["<unk>", "<s>", "</s>"]
SPM_VOCAB_SIZE = 3000


def train_spm(shared: Path):
    """Trains a small Llama-style BPE. Returns (tokens, scores, types, hf_tokenizer)."""
    corpus_dir = shared / "data" / "corpus"
    lines = []
    for name in ("tinyshakespeare.txt", "gpl-3.0.txt"):
        text = (corpus_dir / name).read_text(encoding="utf-8")
        lines.extend(text[:150_000].split("\n"))
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trainer_tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    # Training only: words are "▁piece" and runs of "▁" (so merges never span a word boundary, like
    # SentencePiece's split_by_whitespace), while runs of spaces still get pieces of their own.
    trainer_tok.pre_tokenizer = pre_tokenizers.Split(Regex("\u2581+(?=\u2581)|\u2581[^\u2581]*|[^\u2581]+"),
                                                     behavior="isolated")
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=SPM_VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  special_tokens=SPM_SPECIAL + byte_tokens, limit_alphabet=120)
    trainer_tok.train_from_iterator([ln for ln in lines if ln], trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab: dict[str, int] = trained["vocab"]
    merges = [tuple(m) if not isinstance(m, str) else tuple(m.split(" ")) for m in trained["merges"]]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert tokens[:3] == SPM_SPECIAL and tokens[3:259] == byte_tokens, tokens[:5]

    # Scores: a piece scores -(rank of the merge that creates it); bytes, specials and alphabet score 0.
    scores = [0.0] * len(tokens)
    rank_of: dict[str, int] = {}
    for r, (a, b) in enumerate(merges):
        piece = a + b
        if piece not in rank_of:
            rank_of[piece] = r
            scores[vocab[piece]] = -float(r)
    types = [TOKEN_TYPE_NORMAL] * len(tokens)
    types[0] = TOKEN_TYPE_UNKNOWN
    types[1] = types[2] = TOKEN_TYPE_CONTROL
    for i in range(3, 259):
        types[i] = TOKEN_TYPE_BYTE

    # The HF reference the way HF converts a SentencePiece model (LlamaConverter / SentencePieceExtractor):
    # every split of a piece into two vocabulary pieces is a merge, ordered by the piece's score, so that
    # HF's merge-rank BPE picks the same pairs as SentencePiece's highest-score-first merging.
    spm_merges = []
    for piece, r in rank_of.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                spm_merges.append((r, vocab[left], vocab[right], left, right))
    spm_merges.sort()
    model = models.BPE(vocab=dict(vocab), merges=[(l, r) for _, _, _, l, r in spm_merges], unk_token="<unk>",
                       byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPM_SPECIAL])
    return tokens, scores, types, tok, len(merges)


def check_spm(ty: Tachyon, shared: Path, tmp: Path, corpus, show: int, dump_dir) -> list[str]:
    failures = []
    t0 = time.time()
    tokens, scores, types, tok, n_merges = train_spm(shared)
    path = tmp / "spm-llama.gguf"
    write_gguf(path, model="llama", tokens=tokens, types=types, scores=scores, bos=1, eos=2, unk=0,
               add_space_prefix=True, add_bos=True)
    texts = [t for _, t in corpus]
    hf = hf_encode(tok, texts)
    ty_ids = ty.tokenize(path, texts, tag="spm")
    special_text = [any(s in t for s in SPM_SPECIAL) for t in texts]
    m_plain = Mismatches("spm ids (no special-token text)", show)
    m_special = Mismatches("spm ids (with <unk>/<s>/</s> text)", show)
    for (category, text), h, t, sp in zip(corpus, hf, ty_ids, special_text):
        if h != t:
            (m_special if sp else m_plain).add(category, text, h, t, tok)
    dump(dump_dir, "spm_ids", m_plain, tok)
    dump(dump_dir, "spm_ids_special", m_special, tok)
    n_sp = sum(special_text)
    n_plain = len(corpus) - n_sp
    byte_fallback_strings = sum(1 for ids in hf if any(3 <= i < 259 for i in ids))

    # Round trip through tachyon detokenize (llama.cpp / HF strip the one leading space the prefix added).
    # Not exact in HF either where special-token text sits mid-string (the prefix space added after a
    # special token decodes as a space) or the text holds U+2581 itself; those are held to HF's decode.
    ref_lossy = [tok.decode(h, skip_special_tokens=False) != text for h, text in zip(hf, texts)]
    decoded = ty.detokenize(path, ty_ids, tag="spm_detok")
    m_rt = Mismatches("spm round trip", show)
    m_hfdec = Mismatches("spm decode vs HF decode", show)
    rt_exact = 0
    for (category, text), ids, got, lossy in zip(corpus, ty_ids, decoded, ref_lossy):
        if got == text:
            rt_exact += 1
        elif not lossy:
            m_rt.add(category, text, text, got, None, note=f"ids: {ids[:30]}")
        if all(0 <= i < len(tokens) for i in ids):
            hf_text = tok.decode(ids, skip_special_tokens=False)
            if hf_text != got:
                m_hfdec.add(category, text, hf_text, got, None, note=f"ids: {ids[:30]}")
    dump(dump_dir, "spm_roundtrip", m_rt, None)

    m_any = check_arbitrary_decode(ty, path, tok, "spm", show, spm_byte_stream_decoder(tokens, types))

    # --no-special on the strings with special-token text: <unk>, <s>, </s> are plain text then.
    sel = [i for i, sp in enumerate(special_text) if sp]
    tok.encode_special_tokens = True
    hf_p = hf_encode(tok, [texts[i] for i in sel])
    tok.encode_special_tokens = False
    ty_p = ty.tokenize(path, [texts[i] for i in sel], ["--no-special"], tag="spm_nospecial")
    m_nosp = compare_ids("spm ids --no-special", [corpus[i] for i in sel], hf_p, ty_p, tok, show)

    # --add-special: add_bos_token = true in this GGUF, so BOS (id 1) leads.
    sample = [t for t, sp in zip(texts, special_text) if not sp][:100]
    ty_add = ty.tokenize(path, sample, ["--add-special"], tag="spm_addspecial")
    n_add_ok = sum(1 for s, ids in zip(sample, ty_add) if ids == [1] + hf[texts.index(s)])

    # The same tokenizer as a Hugging Face folder's tokenizer.json (what transformers' LlamaConverter
    # writes for Llama 2 / Mistral): the same ids as HF, and the same as the GGUF gave.
    folder = tmp / "spm-folder"
    if folder.exists():
        shutil.rmtree(folder)
    tiny_models.write_hf_folder("llama_gqa", "f32", folder)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}))
    ty_folder = ty.tokenize(folder, texts, tag="spm_folder")
    m_folder = Mismatches("spm ids from tokenizer.json (no special-token text)", show)
    for (category, text), h, t, sp in zip(corpus, hf, ty_folder, special_text):
        if h != t and not sp:
            m_folder.add(category, text, h, t, tok)
    folder_same_as_gguf = sum(1 for a, b in zip(ty_folder, ty_ids) if a == b)
    if folder_same_as_gguf != len(ty_ids):
        failures.append(f"spm tokenizer.json: {len(ty_ids) - folder_same_as_gguf} strings tokenize "
                        f"differently from the GGUF with the same vocabulary")
    failures.extend([m_folder.summary()] if m_folder.items else [])

    print(f"tokenizer spm (llama, {len(tokens)} tokens, {n_merges} trained merges, byte fallback): "
          f"{n_plain} strings without special-token text compared, {n_plain - len(m_plain.items)} identical; "
          f"{n_sp} with <unk>/<s>/</s> text, {n_sp - len(m_special.items)} identical "
          f"({n_sp - len(m_nosp.items)} with --no-special); "
          f"{byte_fallback_strings} strings use byte tokens; round trips exact {rt_exact}/{len(corpus)} "
          f"({sum(ref_lossy)} not exact in HF either), "
          f"equal to HF decode {len(corpus) - len(m_hfdec.items)}/{len(corpus)}; --add-special BOS "
          f"{n_add_ok}/{len(sample)}; from tokenizer.json: {n_plain - len(m_folder.items)}/{n_plain} "
          f"identical to HF, {folder_same_as_gguf}/{len(ty_ids)} to the GGUF ({time.time() - t0:.1f} s)")
    for m in (m_plain, m_special, m_nosp, m_rt, m_hfdec, m_any):
        if m.items:
            failures.append(m.summary())
    if n_add_ok != len(sample):
        failures.append(f"spm --add-special: {len(sample) - n_add_ok} of {len(sample)} not [BOS] + ids")
    return failures


# ---------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description="tachyon tokenizers vs Hugging Face tokenizers")
    parser.add_argument("--tachyon", required=True, help="path to the tachyon binary")
    parser.add_argument("--shared-dir", required=True, help="the shared folder (holds data/)")
    default_home = os.environ.get("TACHYON_HOME", os.path.expanduser("~/.cache/tachyon"))
    parser.add_argument("--model", default=os.path.join(default_home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--only", default="vocab,smollm,pre,spm", help="comma-separated sections to run")
    parser.add_argument("--show", type=int, default=10, help="mismatches to print per comparison")
    parser.add_argument("--dump-dir", default=None, help="write every mismatch as JSONL here")
    args = parser.parse_args()

    sections = set(args.only.split(","))
    shared = Path(args.shared_dir).resolve()
    model = Path(args.model)
    smollm_dir = shared / "data" / "tokenizers" / "smollm-135m"
    dump_dir = Path(args.dump_dir) if args.dump_dir else None
    if not Path(args.tachyon).is_file():
        print(f"compare_hf_tokenizer: tachyon binary not found at {args.tachyon}", file=sys.stderr)
        return 2
    if ("vocab" in sections or "smollm" in sections) and not model.is_file():
        print(f"compare_hf_tokenizer: model not found at {model} (set --model or TACHYON_HOME)", file=sys.stderr)
        return 2

    t_start = time.time()
    corpus = make_corpus(shared)
    print(f"corpus: {len(corpus)} strings, {sum(len(t) for _, t in corpus)} code points")
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tachyon-tok-") as tmpdir:
        tmp = Path(tmpdir)
        ty = Tachyon(args.tachyon, tmp)
        steps = [
            ("vocab", lambda: check_vocab(model, smollm_dir) or []),
            ("smollm", lambda: check_smollm(ty, model, smollm_dir, corpus, args.show, dump_dir)),
            ("pre", lambda: check_pre_types(ty, shared, tmp, corpus, args.show, dump_dir)),
            ("spm", lambda: check_spm(ty, shared, tmp, corpus, args.show, dump_dir)),
        ]
        for name, fn in steps:
            if name not in sections:
                continue
            try:
                failures.extend(fn())
            except (CheckFailed, TachyonError) as e:
                print(f"{name}: FAILED: {e}")
                failures.append(f"{name}: {str(e)[:500]}")
    print(f"total {time.time() - t_start:.1f} s, {ty.calls} tachyon runs")
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print("all tokenizer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
