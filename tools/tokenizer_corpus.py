#!/usr/bin/env python3
"""Deterministic corpus of test strings for tokenizer checks.

make_corpus() returns a list of (category, text) pairs, the same on every run
(fixed seed, no dependence on hash randomisation or the platform). The strings
cover English prose, source code, many scripts, emoji, combining marks,
zero-width characters, odd whitespace, numbers, contractions, special-token
text, random mixes and random Unicode scalar values, plus hand-picked edge
cases.

    from tokenizer_corpus import make_corpus
    for category, text in make_corpus(shared_dir): ...

Run as a script to write one JSON string per line:

    python tools/tokenizer_corpus.py --out corpus.jsonl [--shared-dir ../shared]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import unicodedata
from pathlib import Path

SEED = 20240611

# Special-token text of the ChatML family (all are added tokens of SmolLM2).
SPECIAL_TOKENS = ["<|im_start|>", "<|endoftext|>", "<|im_end|>"]
# Other special-looking text (also SmolLM2 added tokens, or near misses).
OTHER_SPECIAL_TEXT = ["<repo_name>", "<file_sep>", "<jupyter_code>", "<empty_output>",
                      "<|im_start", "im_end|>", "<|IM_START|>", "< |im_end|>", "<|im_end|", "<s>",
                      "</s>", "<unk>", "<0x41>"]

PROSE_EXTRA = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world!",
    "hello world",
    " Hello",
    "Hello ",
    "  leading and trailing  ",
    "e-mail: someone@example.com, web: https://example.org/path?q=1&r=two#frag",
    "Mr. O'Neil's dog--a 3-year-old--wasn't there.",
    "ALL CAPS SENTENCE WITH SOME WORDS.",
    "camelCaseIdentifier snake_case_identifier kebab-case-identifier",
    "Ünïcödé àccents in Latin: café, naïve, façade, jalapeño, Œuvre, Straße.",
    "Tab\tseparated\tvalues\tand\ttext",
    "Question? Exclamation! Ellipsis... Interrobang?! Quotes “curly” ‘single’ «guillemets».",
    "Dashes – en — em ‒ figure ― horizontal; bullets • ◦ ‣",
    "tachyon is a tokenizer; the tachyon tokenizer tokenizes text for tachyon.",
    "Tachyon tachyon TACHYON tachyons tokenizer tokenizers\n        tachyon(tokenizer)",
]

CODE_C = [
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
    "static inline uint32_t rotl(uint32_t x, int k) {\n\treturn (x << k) | (x >> (32 - k));\n}\n",
    "for (size_t i = 0; i < n; ++i) {\n        if (a[i] != b[i]) { return -1; }\n}\n",
    "struct Node {\n  int value;\n  struct Node *next;\n};\n",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "x += y << 2; y ^= ~z & 0xFF; p->q = &r[3]; /* comment */ // line comment\n",
    "if (x==1&&y!=2||z>=3) {\n\t\tfoo(x,y,z);\n\t}\n",
]
CODE_PY = [
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Foo(object):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, x=None):\n        self.x = x or {}\n",
    "import os, sys\nprint(f\"{sys.argv[0]!r}: {os.getcwd()}\")\n",
    "    # indented comment\n        x = [i ** 2 for i in range(10) if i % 3 == 0]\n",
    "with open('file.txt', encoding='utf-8') as fh:\n\tfor line in fh:\n\t\tprint(line.rstrip('\\n'))\n",
    "lambda x, *args, **kwargs: (x, args, kwargs)",
    "if __name__ == '__main__':\n    main()\n",
]
CODE_JSON = [
    '{"name": "tachyon", "version": "0.1.0", "tags": ["llm", "inference"], "nested": {"a": 1, "b": [true, false, null]}}',
    '{\n  "key": "value",\n  "number": 3.14159,\n  "list": [\n    1,\n    2,\n    3\n  ]\n}',
    '[{"id":1,"text":"a\\nb"},{"id":2,"text":"\\u00e9\\t\\"q\\""}]',
    '{"messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]}',
]

SCRIPTS = {
    "chinese": ["你好，世界！", "我们今天去公园散步吧。", "机器学习是人工智能的一个分支。", "中华人民共和国", "繁體中文字與简体中文字",
                "北京时间2024年6月11日", "这是一个测试：标点符号“引号”、《书名号》。"],
    "japanese": ["こんにちは、世界！", "カタカナとひらがなと漢字を混ぜた文章です。", "東京都渋谷区", "ｶﾀｶﾅ（半角）",
                 "私はコーヒーが好きです。", "ラーメン・寿司・天ぷら", "〜ですね？"],
    "korean": ["안녕하세요, 세계!", "한국어 문장을 토큰화합니다.", "대한민국 서울특별시", "ㄱㄴㄷㄹ ㅏㅑㅓㅕ"],
    "cyrillic": ["Привет, мир!", "Съешь же ещё этих мягких французских булок, да выпей чаю.", "Україна, Київ — ґанок, їжак.",
                 "МОСКВА И САНКТ-ПЕТЕРБУРГ", "Ёлка"],
    "arabic": ["مرحبا بالعالم!", "اللغة العربية جميلة.", "السلام عليكم ورحمة الله", "عدد ١٢٣٤٥٦٧٨٩٠", "كِتَابٌ"],
    "hebrew": ["שלום עולם!", "עברית נכתבת מימין לשמאל.", "בְּרֵאשִׁית בָּרָא", "ירושלים 2024"],
    "thai": ["สวัสดีชาวโลก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "กรุงเทพมหานคร"],
    "devanagari": ["नमस्ते दुनिया!", "हिन्दी भाषा देवनागरी लिपि में लिखी जाती है।", "संस्कृतम्", "क्षत्रिय ज्ञान"],
    "greek": ["Γειά σου Κόσμε!", "Ελληνικά με τόνους: άέήίόύώ ΐΰ", "ΑΒΓΔ αβγδ"],
    "other": ["Ողջույն", "გამარჯობა", "ሰላም ልዑል", "ជំរាបសួរ", "မင်္ဂလာပါ", "வணக்கம்", "ਸਤਿ ਸ੍ਰੀ ਅਕਾਲ", "ཀུ་སྒྲོ།",
              "Xin chào thế giới", "Türkçe ğüşıöç İı", "Zażółć gęślą jaźń", "Þetta er íslenska"],
}

EMOJI = ["😀", "😂", "🥲", "❤️", "❤", "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿", "🙏🏽", "👋🏿",
         "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🧑‍💻", "👩🏽‍🚀", "🏳️‍🌈", "🏴‍☠️", "🇺🇸", "🇯🇵", "🇩🇪", "🇫🇷", "🇧🇷",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "©️", "™", "☀️", "⌚", "🀄", "🫠", "🦀", "🐍", "🚀", "✨", "🔥", "💯"]

COMBINING = ["\u0301", "\u0300", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0328", "\u0323", "\u0331",
             "\u0336", "\u20dd", "\u0489", "\u0352", "\u0361"]

ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\ufeff", "\u00ad", "\u2060", "\u200e", "\u200f", "\u202e", "\u180e"]

ODD_SPACE = ["\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\r\n", "\r", "\v", "\f", "\t", "\u2002", "\u2003",
             "\u2009", "\u200a", "\u202f", "\u205f", "\u1680", "\x1c", "\x1d", "\x1e", "\x1f", "\n"]

CONTRACTIONS = ["don't", "DON'T", "Don't", "she'll", "SHE'LL", "She'Ll", "I'm", "I'M", "you're", "YOU'RE",
                "we've", "WE'VE", "it's", "IT'S", "he'd", "HE'D", "they'll", "can't", "won't", "y'all", "'tis",
                "o'clock", "rock 'n' roll", "don’t", "it’s", "ma'am", "'s", "'S", "'ll", "'LL", "'re", "'Re",
                "'ve", "'VE", "'m", "'d", "'D", "James's", "JAMES'S", "students'", "1990's",
                "it'\u017f", "'\u017f", "WE'\u212aNOW", "'\u0130", "'\u0131", "I'M\u0307"]

NUMBERS_FIXED = ["0", "00", "007", "1,000,000", "1.000.000,50", "3.14159265358979", "-42", "+1e-10", "6.022e23",
                 "0x1F", "0b1010", "1_000_000", "12:30:45", "2024-06-11", "$1,234.56", "€99,99", "50%",
                 "１２３４５", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "๐๑๒๓", "²³¹⁴", "x² + y³", "½ ¼ ¾", "Ⅻ ⅻ",
                 "①②③", "𝟘𝟙𝟚", "1st 2nd 3rd 4th", "v1.2.3", "192.168.0.1", "+1 (555) 123-4567", "3/4", "10^9",
                 "1234567890123456789012345678901234567890"]


def _read_corpus_texts(shared_dir: Path) -> list[str]:
    corpus_dir = shared_dir / "data" / "corpus"
    texts = []
    for path in sorted(corpus_dir.glob("*.txt")):
        texts.append(path.read_text(encoding="utf-8"))
    if not texts:
        raise FileNotFoundError(f"no *.txt files under {corpus_dir}")
    return texts


def _sentences(texts: list[str]) -> list[str]:
    out = []
    for text in texts:
        # Paragraph-ish units, then sentence-ish pieces.
        for para in re.split(r"\n\s*\n", text):
            para = para.strip("\n")
            if not para:
                continue
            for sentence in re.split(r"(?<=[.!?;:])\s+", para):
                if 1 <= len(sentence) <= 400:
                    out.append(sentence)
    return out


def _random_identifier(rng: random.Random) -> str:
    words = ["value", "count", "buf", "node", "tmp", "result", "index", "x", "y", "data", "len", "ptr", "self",
             "token", "vocab", "kMaxSize", "HTTPServer", "parse_json", "__init__", "_private", "i", "j"]
    return rng.choice(words) + (str(rng.randrange(100)) if rng.random() < 0.2 else "")


def _random_code(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        base = rng.choice(CODE_C + CODE_PY + CODE_JSON)
        # Re-indent with a random indentation unit.
        unit = rng.choice(["  ", "    ", "\t", "        ", "\t\t", "   "])
        return re.sub(r"(?m)^( {4}|\t)", unit, base)
    if kind == 1:
        depth = rng.randrange(1, 6)
        unit = rng.choice(["  ", "    ", "\t"])
        lines = []
        for d in range(depth):
            lines.append(unit * d + rng.choice(["if", "for", "while", "def", "elif"]) + " " +
                         _random_identifier(rng) + rng.choice([" > ", " == ", " in ", "("]) +
                         str(rng.randrange(1000)) + rng.choice([":", "):", " {"]))
        lines.append(unit * depth + _random_identifier(rng) + " = " + _random_identifier(rng) +
                     rng.choice(["()", "[0]", ".attr", " + 1", "->next", "++"]) + rng.choice([";", ""]))
        return "\n".join(lines) + rng.choice(["", "\n", "\n\n", "\r\n"])
    if kind == 2:
        obj = {}
        for _ in range(rng.randrange(1, 6)):
            key = _random_identifier(rng)
            obj[key] = rng.choice([rng.randrange(-10**6, 10**6), rng.random() * 100, "str" * rng.randrange(3), None,
                                   True, [1, 2, 3], {"k": "v"}, "ünï €"])
        indent = rng.choice([None, 1, 2, 4, "\t"])
        return json.dumps(obj, indent=indent, ensure_ascii=rng.random() < 0.5)
    a, b = _random_identifier(rng), _random_identifier(rng)
    op = rng.choice(["+", "-", "*", "/", "%", "<<", ">>", "&&", "||", "==", "!=", "<=", ">=", "->", "::", "**", "//",
                     "+=", "=>", "...", "|>", "?.", "??"])
    return f"{a}{rng.choice(['', ' '])}{op}{rng.choice(['', ' '])}{b}{rng.choice([';', '', ')', '];', ' {', ':'])}"


def _random_scalar(rng: random.Random) -> str:
    while True:
        plane_pick = rng.random()
        if plane_pick < 0.5:
            cp = rng.randrange(0x20, 0x3000)
        elif plane_pick < 0.8:
            cp = rng.randrange(0x3000, 0x10000)
        elif plane_pick < 0.95:
            cp = rng.randrange(0x10000, 0x30000)
        else:
            cp = rng.randrange(0x30000, 0x110000)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        return chr(cp)


def _random_assigned_scalar(rng: random.Random) -> str:
    while True:
        ch = _random_scalar(rng)
        if unicodedata.category(ch) not in ("Cn", "Co", "Cs"):
            return ch


def make_corpus(shared_dir: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """Returns [(category, text), ...], deterministic for a given shared data folder."""
    if shared_dir is None:
        shared_dir = Path(__file__).resolve().parent.parent.parent / "shared"
    shared_dir = Path(shared_dir)
    rng = random.Random(SEED)
    texts = _read_corpus_texts(shared_dir)
    sentences = _sentences(texts)
    all_text = "\n".join(texts)
    items: list[tuple[str, str]] = []

    def add(category: str, text: str) -> None:
        items.append((category, text))

    # --- edge cases -------------------------------------------------------------------------
    for s in ["", " ", "  ", "\n", "\t", "\r", "\r\n", "a", "A", "0", "'", "\"", "\\", "/", "<", ">", "|", "!", ".",
              "\x00", "\x01", "\x7f", "\u0080", "\u00ff", "\u0100", "\uffff", "\U0010ffff", "\U0001f600", "é", "e\u0301",
              "'s", " 's", "''", "' '", " \n", "\n ", " \n ", "\t\n", " a", "a ", " a ", "  a", "a  ", "\u00a0",
              "\u3000", "\ufeff", "\u200b", "\u00ad", "ab", "a\nb", "a\n\nb", "a \nb", "a\n b", "1", " 1", "1 ",
              "12", "123", "1234", " 1234", "a1", "1a", "I", " I", "I'", "I'm", " I'm", "I 'm",
              "\u2581", "\u2581\u2581", "a\u2581b", " \u2581", "\u2581 the", "Ġ", "Ċ", "ĠĠ", "<0x0A>"]:
        add("edge", s)
    for n in list(range(1, 17)) + [31, 32, 33, 64, 100, 101, 128, 200, 257, 500, 1000]:
        add("edge", " " * n)
        add("edge", "\n" * min(n, 300))
        add("edge", "\t" * min(n, 300))
        add("edge", "a" + " " * n + "b")
    for ch in range(0x20, 0x7f):  # every printable ASCII char alone, then as a pair with a space
        add("edge", chr(ch))
        add("edge", " " + chr(ch))
    for ch in range(0x80, 0x100):  # single Latin-1 chars (two UTF-8 bytes)
        add("edge", chr(ch))

    # --- English prose ----------------------------------------------------------------------
    for s in PROSE_EXTRA:
        add("prose", s)
    for _ in range(1100):
        s = rng.choice(sentences)
        r = rng.random()
        if r < 0.15 and len(s) > 10:  # a fragment cut at random character positions
            a = rng.randrange(len(s) // 2)
            b = rng.randrange(a + 1, len(s) + 1)
            s = s[a:b]
        elif r < 0.25:
            s = rng.choice([" ", "  ", "\n", "\t", ""]) + s + rng.choice([" ", "\n", "\n\n", "  ", ""])
        add("prose", s)
    for _ in range(200):  # multi-line raw chunks of the corpus files, newlines and indentation kept
        start = rng.randrange(len(all_text) - 1200)
        add("prose_chunk", all_text[start:start + rng.randrange(20, 1200)])
    for _ in range(100):
        s = rng.choice(sentences)
        add("prose_case", rng.choice([s.upper(), s.lower(), s.title(), s.swapcase()]))

    # --- source code ------------------------------------------------------------------------
    for s in CODE_C + CODE_PY + CODE_JSON:
        add("code", s)
    for _ in range(400):
        add("code", _random_code(rng))

    # --- scripts ----------------------------------------------------------------------------
    for script, phrases in SCRIPTS.items():
        for p in phrases:
            add("script_" + script, p)
            add("script_" + script, " " + p)
    all_phrases = [p for ps in SCRIPTS.values() for p in ps]
    for _ in range(450):
        n = rng.randrange(1, 4)
        parts = [rng.choice(all_phrases) for _ in range(n)]
        sep = rng.choice([" ", "", "\n", ", ", " - "])
        s = sep.join(parts)
        if rng.random() < 0.3:  # substring, cut anywhere
            a = rng.randrange(len(s))
            s = s[a:a + rng.randrange(1, 40)]
        add("script_mix", s)

    # --- emoji ------------------------------------------------------------------------------
    for e in EMOJI:
        add("emoji", e)
        add("emoji", " " + e)
    for _ in range(300):
        n = rng.randrange(1, 6)
        seps = ["", " ", "", "\u200d", "\n"]
        s = "".join(rng.choice(EMOJI) + rng.choice(seps) for _ in range(n))
        if rng.random() < 0.5:
            s = rng.choice(sentences)[:60] + rng.choice(["", " "]) + s
        add("emoji", s)

    # --- combining marks, NFC vs NFD --------------------------------------------------------
    accented = ["é", "è", "ê", "ë", "ñ", "ü", "Å", "ç", "ǖ", "ệ", "ṩ", "Ḗ", "가", "각", "ガ", "ば", "ḯ", "ỗ"]
    for a in accented:
        add("combining", unicodedata.normalize("NFC", a))
        add("combining", unicodedata.normalize("NFD", a))
    for word in ["café", "naïve", "résumé", "Ångström", "über", "Mañana", "Việt Nam", "한국어", "ポケモン", "Zoë's"]:
        for form in ["NFC", "NFD", "NFKC", "NFKD"]:
            add("combining", unicodedata.normalize(form, word))
    for _ in range(220):
        base = rng.choice("aeiouAEIOUnxyz ó1.-" + "あ한Ж")
        marks = "".join(rng.choice(COMBINING) for _ in range(rng.randrange(1, 9)))
        s = base + marks
        if rng.random() < 0.5:
            s = rng.choice(["word ", "", " ", "x"]) + s + rng.choice(["", " word", "!", "1"])
        add("combining", s)
    add("combining", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e"
        "\u0320\u034da\u0365\u0302\u0360\u0315l\u036fg\u0306o\u0352\u0324!")
    add("combining", "\u0301")  # a lone combining mark
    add("combining", " \u0301")

    # --- zero-width characters --------------------------------------------------------------
    for z in ZERO_WIDTH:
        add("zero_width", z)
        add("zero_width", "word" + z + "word")
        add("zero_width", " " + z + " ")
        add("zero_width", z + "Hello")
        add("zero_width", "word " + z + "word")
    for _ in range(200):
        words = rng.choice(sentences).split(" ")[:8]
        s = ""
        for w in words:
            s += w + (rng.choice(ZERO_WIDTH) if rng.random() < 0.5 else "") + rng.choice([" ", "", " "])
        add("zero_width", s)

    # --- unusual whitespace and long runs ---------------------------------------------------
    for w in ODD_SPACE:
        add("whitespace", w)
        add("whitespace", "a" + w + "b")
        add("whitespace", " " + w)
        add("whitespace", w + " x")
        add("whitespace", w * 3)
    for _ in range(320):
        n = rng.randrange(1, 8)
        s = ""
        for _ in range(n):
            if rng.random() < 0.5:
                s += rng.choice(["word", "Hello", "x", "42", "é", ".", "'s", "中文", "def"])
            run = rng.choice(ODD_SPACE + [" ", " ", "  "])
            s += run * rng.choice([1, 1, 2, 3, 5, 8, 17, 40, 120])
        add("whitespace", s)
    add("whitespace", " " * 150 + "text")
    add("whitespace", "text" + " " * 150)
    add("whitespace", "\n" * 120 + "x" + "\t" * 120)
    add("whitespace", " \t" * 80 + "\n")
    add("whitespace", "\r\n" * 60)
    add("whitespace", ("    " * 30) + "deeply_indented()\n")

    # --- very long inputs (regex engines' stack/backtracking limits, BPE on huge words) -------
    add("long", " " * 20000)
    add("long", " " * 20000 + "x")
    add("long", "\n" * 10000 + "end")
    add("long", "\t \n" * 5000)
    add("long", "a" * 10000)
    add("long", "ab" * 5000 + " " + "中" * 5000)
    add("long", "".join(str(i % 10) for i in range(20000)))
    add("long", "!" * 10000)
    add("long", "\u0301" * 3000)
    add("long", "😀" * 3000)
    start = rng.randrange(len(all_text) - 60000)
    add("long", all_text[start:start + 50000])

    # --- numbers ----------------------------------------------------------------------------
    for s in NUMBERS_FIXED:
        add("numbers", s)
        add("numbers", "x " + s + " y")
    for _ in range(380):
        r = rng.randrange(8)
        if r == 0:
            s = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 80)))
        elif r == 1:
            s = f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 12)}f}"
        elif r == 2:
            s = f"{rng.randrange(10**9):,}"
        elif r == 3:
            s = "".join(chr(0xFF10 + int(d)) for d in str(rng.randrange(10**8)))
        elif r == 4:
            s = "".join(chr(0x0660 + int(d)) for d in str(rng.randrange(10**8)))
        elif r == 5:
            s = "".join(rng.choice("⁰¹²³⁴⁵⁶⁷⁸⁹₀₁₂₃") for _ in range(rng.randrange(1, 8)))
        elif r == 6:
            s = f"{rng.choice(['In', 'On', 'Around'])} {rng.randrange(1000, 2100)}, {rng.randrange(1, 10**7)} people " \
                f"paid ${rng.randrange(10**6) / 100} ({rng.randrange(100)}%)."
        else:
            s = f"{rng.randrange(10**12)}{rng.choice(['', ' ', 'x', 'abc', '.', '-'])}{rng.randrange(10**6)}"
        add("numbers", s)

    # --- contractions -----------------------------------------------------------------------
    for c in CONTRACTIONS:
        add("contractions", c)
        add("contractions", " " + c)
        add("contractions", c + "!")
    subjects = ["I", "you", "she", "HE", "We", "THEY", "it", "Who", "that", "There"]
    tails = ["'s", "'S", "'ll", "'LL", "'Ll", "'re", "'RE", "'ve", "'VE", "'m", "'M", "'d", "'D", "n't", "N'T", "’s",
             "'t", "'T"]
    for _ in range(220):
        s = rng.choice(subjects) + rng.choice(tails)
        s = rng.choice(["", " ", "\n", "\"", "("]) + s + rng.choice(["", " go", " GONE.", "'", "'s", "123"])
        add("contractions", s)

    # --- special-token text -----------------------------------------------------------------
    chat = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n" \
           "<|im_start|>assistant\n"
    add("special", chat)
    add("special", chat + "Hello! How can I help?<|im_end|>\n<|endoftext|>")
    for t in SPECIAL_TOKENS + OTHER_SPECIAL_TEXT:
        add("special", t)
        add("special", " " + t)
        add("special", t + " ")
        add("special", "\n" + t + "\n")
        add("special", "abc" + t + "def")
        add("special", t + t)
    for _ in range(300):
        words = rng.choice(sentences).split(" ")
        pos = rng.randrange(len(words) + 1)
        tok = rng.choice(SPECIAL_TOKENS * 3 + OTHER_SPECIAL_TEXT)
        glue_l = rng.choice(["", " ", "\n", "  ", "\n\n", "\t"])
        glue_r = rng.choice(["", " ", "\n", "  ", "\n\n", "\t"])
        s = " ".join(words[:pos]) + glue_l + tok + glue_r + " ".join(words[pos:])
        add("special", s)

    # --- random mixes of everything ---------------------------------------------------------
    pools = [
        lambda: rng.choice(sentences)[:80],
        lambda: _random_code(rng)[:80],
        lambda: rng.choice(all_phrases),
        lambda: rng.choice(EMOJI),
        lambda: rng.choice("aeon") + rng.choice(COMBINING),
        lambda: rng.choice(ZERO_WIDTH),
        lambda: rng.choice(ODD_SPACE) * rng.randrange(1, 4),
        lambda: rng.choice(NUMBERS_FIXED),
        lambda: rng.choice(CONTRACTIONS),
        lambda: rng.choice(SPECIAL_TOKENS),
        lambda: _random_assigned_scalar(rng),
        lambda: " " * rng.randrange(1, 12),
    ]
    for _ in range(800):
        s = ""
        for _ in range(rng.randrange(2, 9)):
            s += rng.choice(pools)()
            if rng.random() < 0.4:
                s += " "
        add("mix", s)

    # --- random Unicode scalar values -------------------------------------------------------
    for _ in range(250):
        add("random_scalars", "".join(_random_assigned_scalar(rng) for _ in range(rng.randrange(1, 24))))
    for _ in range(150):
        add("random_scalars_any", "".join(_random_scalar(rng) for _ in range(rng.randrange(1, 24))))
    for _ in range(100):  # control characters and friends
        add("controls", "".join(chr(rng.choice(list(range(0, 0x20)) + [0x7f] + list(range(0x80, 0xa0))))
                                + rng.choice(["", "a", " ", "1"]) for _ in range(rng.randrange(1, 6))))

    return items


def write_jsonl(items: list[tuple[str, str]], path: str | os.PathLike) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for _, text in items:
            f.write(json.dumps(text, ensure_ascii=False) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSONL file to write (one JSON string per line)")
    parser.add_argument("--shared-dir", default=None, help="the shared folder (holds data/corpus/)")
    parser.add_argument("--with-category", action="store_true",
                        help="write [category, text] pairs instead of bare strings")
    args = parser.parse_args()
    items = make_corpus(args.shared_dir)
    if args.with_category:
        with open(args.out, "w", encoding="utf-8", newline="\n") as f:
            for cat, text in items:
                f.write(json.dumps([cat, text], ensure_ascii=False) + "\n")
    else:
        write_jsonl(items, args.out)
    print(f"wrote {len(items)} strings to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
