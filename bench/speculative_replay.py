#!/usr/bin/env python3
"""How fast prompt lookup could decode the committed prompts at best (issue 25): replays the
default model's greedy answers to bench/speculative_prompts.json through prompt-lookup variants
offline and estimates the decode speed-up from the accepted tokens per step and a step's cost.

Step 1 (`--collect`) asks `tachyon serve` for each prompt's greedy answer (128 tokens, the chat
template applied by `tachyon template`) and keeps prompt + answer as token ids. Step 2 replays
each answer token by token: at each step a proposer sees the tokens so far and guesses up to k
tokens; the guesses that equal the answer's next tokens are accepted, plus the one token the
verifying pass itself samples. A step verifying d guesses costs `step_cost(d)` single-token
steps (measured on the AVX-512 machines of issue 25: a 4-token step ~1.15x a 1-token one, a
9-token step ~1.9x). Speed-up = answer tokens / the steps' summed cost. Variants: the longest
suffix n-gram (n up to --max-ngram) at its latest occurrence (what NgramIndex does), drafting
only from matches of at least `min-n` tokens, and an oracle that guesses right whenever the next
tokens occur anywhere before (the bound for any proposer that copies from the context).

    .venv/bin/python bench/speculative_replay.py --collect      # writes the answers' ids
    .venv/bin/python bench/speculative_replay.py                # the table
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "api"))
from server_fixture import TachyonServer  # noqa: E402

PROMPTS = ROOT / "bench" / "speculative_prompts.json"


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def collect(tachyon: str, out: Path, max_tokens: int) -> None:
    """Each prompt set's (prompt length, prompt + greedy answer ids)."""
    prompts = json.loads(PROMPTS.read_text())
    sequences = {}
    with TachyonServer(tachyon, None, ["-t", "2", "--model-alias", "m"]) as server:
        for kind in ("grounded", "open"):
            rows = []
            for item in prompts[kind]:
                with tempfile.NamedTemporaryFile("w", suffix=".json") as messages:
                    json.dump(item["messages"], messages)
                    messages.flush()
                    text = subprocess.run([tachyon, "template", "--messages", messages.name,
                                           "--add-generation-prompt"], capture_output=True,
                                          text=True, check=True).stdout
                ids = post(server.url + "/tokenize", {"content": text})["tokens"]
                reply = post(server.v1 + "/completions", {"model": "m", "prompt": ids,
                                                          "max_tokens": max_tokens,
                                                          "temperature": 0})
                # The answer's ids as the tokenizer gives them back (BPE round-trips the model's
                # own output but for rare merges; the replay needs only the sequence).
                both = post(server.url + "/tokenize",
                            {"content": text + reply["choices"][0]["text"]})["tokens"]
                rows.append({"prompt": len(ids), "tokens": both})
            sequences[kind] = rows
    out.write_text(json.dumps(sequences) + "\n")


def step_cost(drafted: int) -> float:
    """A step verifying `drafted` guesses, in single-token steps."""
    return 1 + 0.05 * drafted if drafted <= 3 else 1.15 + 0.15 * (drafted - 3)


class LatestNgram:
    """NgramIndex's rule: the longest suffix (max_ngram down to 1) seen before, the tokens that
    followed its latest earlier occurrence."""

    def __init__(self, max_ngram: int):
        self.max_ngram = max_ngram
        self.after: dict[tuple, int] = {}
        self.indexed = 0

    def propose(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        for p in range(max(self.indexed, 1), len(tokens)):
            for n in range(1, min(self.max_ngram, p) + 1):
                self.after[tuple(tokens[p - n:p])] = p
        self.indexed = len(tokens)
        for n in range(min(self.max_ngram, len(tokens) - 1), 0, -1):
            found = self.after.get(tuple(tokens[len(tokens) - n:]))
            if found is not None:
                return n, tokens[found:found + k]
        return 0, []


def oracle(tokens: list[int], answer: list[int], k: int) -> list[int]:
    """The longest run of the answer's next tokens (up to k) that occurs anywhere before."""
    text = tokens
    best = 0
    for length in range(1, k + 1):
        want = answer[:length]
        if len(want) < length or not any(text[i:i + length] == want
                                         for i in range(len(text) - length + 1)):
            break
        best = length
    return answer[:best]


def replay(sequences: list[dict], k: int, min_n: int, use_oracle: bool) -> tuple[float, float]:
    """(speed-up, fraction of guesses accepted) over the set."""
    generated = cost = 0.0
    drafted = accepted = 0
    for row in sequences:
        tokens, i = row["tokens"], row["prompt"]
        proposer = LatestNgram(8)
        while i < len(tokens):
            if use_oracle:
                guesses = oracle(tokens[:i], tokens[i:], k)
            else:
                n, guesses = proposer.propose(tokens[:i], k)
                if n < min_n:
                    guesses = []
            right = 0
            while right < len(guesses) and i + right < len(tokens) and \
                    guesses[right] == tokens[i + right]:
                right += 1
            step = min(right + 1, len(tokens) - i)
            generated += step
            cost += step_cost(len(guesses))
            drafted += len(guesses)
            accepted += right
            i += step
    return generated / cost, accepted / max(drafted, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--answers", default="/tmp/tachyon_speculative_answers.json")
    parser.add_argument("--collect", action="store_true", help="ask the server for the answers")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    answers = Path(args.answers)
    if args.collect or not answers.exists():
        collect(args.tachyon, answers, args.max_tokens)
    sequences = json.loads(answers.read_text())
    print("| set | proposer | k | speed-up (estimated) | guesses accepted |")
    print("|---|---|---|---|---|")
    for kind in ("grounded", "open"):
        for k in (2, 3, 4, 8):
            for min_n in (1, 2):
                speed, rate = replay(sequences[kind], k, min_n, False)
                print(f"| {kind} | latest n-gram, n >= {min_n} | {k} | {speed:.2f}x | {rate:.2f} |")
        for k in (3, 8):
            speed, rate = replay(sequences[kind], k, 1, True)
            print(f"| {kind} | oracle (right whenever the context holds it) | {k} | "
                  f"{speed:.2f}x | {rate:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
