#!/usr/bin/env python3
"""Clients that hang up are cancelled and give back their KV blocks.

1. 20 concurrent streaming chat requests that would each run for 1,000 tokens (ignore_eos):
   every client reads a few chunks and closes its connection. /metrics must then show nothing
   running or waiting and no KV block in use within ~10 s, and generation must stop.
2. A non-streaming request with a long prompt whose client hangs up while the prompt is being
   processed: the same.
Afterwards the server still answers normally.

    .venv/bin/python tests/api/disconnect_test.py --tachyon build/tachyon [--model M.gguf]
    .venv/bin/python tests/api/disconnect_test.py --url http://127.0.0.1:8080
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from urllib.parse import urlparse

try:
    import httpx
except ImportError:  # the openai client in .venv ships its HTTP library as httpx2
    import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_fixture import TachyonServer, metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"
CTX = 8192
NUM_CLIENTS = 20
CHUNKS_BEFORE_HANGUP = 3
MAX_TOKENS = 1000
SETTLE_SECONDS = 10.0

RUNNING = "tachyon:num_requests_running"
WAITING = "tachyon:num_requests_waiting"
BLOCKS_USED = "tachyon:kv_cache_blocks_used"
BLOCKS_TOTAL = "tachyon:kv_cache_blocks_total"
GENERATED = "tachyon:generation_tokens_total"

from checks import results, check, info, exit_status  # noqa: E402


def settle(url: str, timeout: float = SETTLE_SECONDS) -> tuple[bool, float, dict]:
    """Polls /metrics until nothing runs or waits and no KV block is used."""
    start = time.monotonic()
    values: dict = {}
    while True:
        values = metrics(url)
        if values.get(RUNNING) == 0 and values.get(WAITING) == 0 and values.get(BLOCKS_USED) == 0:
            return True, time.monotonic() - start, values
        if time.monotonic() - start > timeout:
            return False, time.monotonic() - start, values
        time.sleep(0.1)


def summary(values: dict) -> str:
    return ", ".join(f"{k.split(':')[1]}={values.get(k)}" for k in (RUNNING, WAITING, BLOCKS_USED,
                                                                    BLOCKS_TOTAL, GENERATED))


def streaming_client(url: str, model: str, index: int, outcome: list) -> None:
    body = {"model": model, "stream": True, "max_tokens": MAX_TOKENS, "ignore_eos": True,
            "temperature": 0.8, "seed": index,
            "messages": [{"role": "user", "content": f"Tell me a very long story, number {index}."}]}
    chunks = 0
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    outcome[index] = f"status {response.status_code}: {response.read()[:200]!r}"
                    return
                for line in response.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[len("data: "):])
                    if "error" in chunk:
                        outcome[index] = f"error event {chunk}"
                        return
                    if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                        chunks += 1
                    if chunks >= CHUNKS_BEFORE_HANGUP:
                        break
        # leaving both `with` blocks mid-stream closes the connection
        outcome[index] = "ok" if chunks >= CHUNKS_BEFORE_HANGUP else f"stream ended after {chunks} chunks"
    except Exception as error:  # noqa: BLE001
        outcome[index] = f"{type(error).__name__}: {error}"


def test_streaming_hangups(url: str, model: str) -> None:
    before = metrics(url)
    outcome: list = [None] * NUM_CLIENTS
    threads = [threading.Thread(target=streaming_client, args=(url, model, i, outcome))
               for i in range(NUM_CLIENTS)]
    for thread in threads:
        thread.start()
    peak = 0.0
    while any(t.is_alive() for t in threads):
        try:
            peak = max(peak, metrics(url).get(RUNNING, 0))
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.2)
    for thread in threads:
        thread.join()
    failures = [f"client {i}: {o}" for i, o in enumerate(outcome) if o != "ok"]
    check(f"{NUM_CLIENTS} streaming clients each got {CHUNKS_BEFORE_HANGUP} chunks, then hung up",
          not failures, failures[:5])
    info(f"peak num_requests_running seen while they streamed: {peak:.0f}")
    ok, seconds, values = settle(url)
    check(f"after {NUM_CLIENTS} hang-ups: nothing running or waiting, all KV blocks free "
          f"within {SETTLE_SECONDS:.0f} s", ok, summary(values))
    if ok:
        info(f"settled {seconds:.2f} s after the last client hung up")
        check("kv_cache_blocks_total unchanged (the pool is whole again)",
              values.get(BLOCKS_TOTAL) == before.get(BLOCKS_TOTAL),
              f"{before.get(BLOCKS_TOTAL)} -> {values.get(BLOCKS_TOTAL)}")
        time.sleep(1.5)
        later = metrics(url)
        check("generation stopped: generation_tokens_total no longer grows",
              later.get(GENERATED) == values.get(GENERATED),
              f"{values.get(GENERATED)} -> {later.get(GENERATED)}")
        generated = values.get(GENERATED, 0) - before.get(GENERATED, 0)
        check("the cancelled requests generated far fewer tokens than they asked for",
              generated < NUM_CLIENTS * MAX_TOKENS / 2, f"{generated} tokens generated")


def long_prompt(url: str, target_tokens: int) -> str:
    text = SHAKESPEARE.read_text()[100000:100000 + target_tokens * 6]
    try:
        tokens = httpx.post(url + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]
        ratio = len(text) / max(len(tokens), 1)
        return text[:int(target_tokens * ratio)]
    except Exception:  # noqa: BLE001  (no /tokenize: ~4 characters a token)
        return text[:target_tokens * 4]


def test_nonstreaming_hangup(url: str, model: str, prompt_tokens: int) -> None:
    before = metrics(url)
    body = json.dumps({"model": model, "max_tokens": 2000, "ignore_eos": True, "temperature": 0,
                       "messages": [{"role": "user", "content": long_prompt(url, prompt_tokens)}]}).encode()
    address = urlparse(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + address.netloc.encode() +
                 b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    started = False
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        values = metrics(url)
        if values.get(RUNNING, 0) >= 1:
            started = True
            break
        time.sleep(0.05)
    check("the long non-streaming request started running", started, summary(metrics(url)))
    time.sleep(0.5)  # well inside the prompt (several thousand tokens)
    sock.setblocking(False)
    try:
        early = sock.recv(65536)
    except BlockingIOError:
        early = b""
    check("no response yet when the client hangs up (still processing the prompt)", not early,
          early[:200])
    sock.close()
    ok, seconds, values = settle(url)
    check(f"non-streaming hang-up during the prompt: cancelled, all KV blocks free within "
          f"{SETTLE_SECONDS:.0f} s", ok, summary(values))
    if ok:
        info(f"settled {seconds:.2f} s after the hang-up")
        generated = values.get(GENERATED, 0) - before.get(GENERATED, 0)
        check("the cancelled request did not generate its 2,000 tokens", generated < 1000,
              f"{generated} tokens generated")


def test_still_serving(url: str, model: str) -> None:
    response = httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": model, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}]})
    check("the server still answers after the hang-ups", response.status_code == 200 and
          response.json()["choices"][0]["message"]["content"], f"{response.status_code} {response.text[:200]}")
    ok, _, values = settle(url)
    check("and is idle again afterwards", ok, summary(values))


def run_all(url: str, prompt_tokens: int) -> None:
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    ok, _, values = settle(url)
    check("idle at the start: nothing running, no KV block used, blocks_total > 0",
          ok and values.get(BLOCKS_TOTAL, 0) > 0, summary(values))
    for name, function, args in [("streaming hang-ups", test_streaming_hangups, (url, model)),
                                 ("non-streaming hang-up", test_nonstreaming_hangup, (url, model, prompt_tokens)),
                                 ("still serving", test_still_serving, (url, model))]:
        try:
            function(*args)
        except Exception as error:  # noqa: BLE001
            check(f"{name} (ran without raising)", False,
                  f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", help="GGUF file (default: tachyon's default model)")
    parser.add_argument("--url", help="test this running server instead of starting tachyon")
    parser.add_argument("--prompt-tokens", type=int, default=5500,
                        help="size of the long prompt (it plus 2,000 must fit the context)")
    args = parser.parse_args()
    if args.url:
        run_all(args.url.rstrip("/"), args.prompt_tokens)
    else:
        server = TachyonServer(args.tachyon, args.model, args=["-c", str(CTX)], check_exit=False)
        try:
            with server:
                run_all(server.url, args.prompt_tokens)
                if results["failed"]:
                    server.dump_stderr("some checks failed", last_lines=40)
        except Exception as error:  # noqa: BLE001
            check("server started", False, f"{type(error).__name__}: {error}")
        check("SIGTERM: tachyon serve exits 0", server.returncode == 0, f"exit {server.returncode}")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
