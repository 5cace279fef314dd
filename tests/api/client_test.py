#!/usr/bin/env python3
"""`tachyon chat --url` and `tachyon complete` (issue 29) against a scripted OpenAI-compatible
server (the standard library's http.server) and against `tachyon serve`.

The scripted server answers by what the request says ("retry429" in a prompt: two 429s with
Retry-After: 1, then 200; "retryms": 429 with retry-after-ms: 1500, then 200; "retry503": two
503s, then 200; "quota": 429 insufficient_quota with x-should-retry: false; "bad": 400;
"slow": 200 after 0.3 s) and records every attempt with its time. Checked:
1. complete: 429 with Retry-After and retry-after-ms are waited out as asked, 503 retried,
   insufficient_quota and 400 given up after one attempt, each line's result in OpenAI's batch
   output format, the exit code says some failed.
2. complete killed (SIGKILL) mid-batch, then run again: every line has exactly one result and
   at most the requests in flight at the kill were sent twice.
3. chat --url: streams the reply, waits out a 429 (and says so on stderr), and leaves out the
   oldest turns when /tokenize and max_model_len say the conversation no longer fits ("chat429":
   one 429 with Retry-After: 1).
4. Against `tachyon serve --api-key K`: complete and chat --url work end to end.

    .venv/bin/python tests/api/client_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from server_fixture import TachyonServer  # noqa: E402

MAX_MODEL_LEN = 64


class Script:
    """What the fake server saw: (time, path, body) per attempt, and per-scenario counters."""

    def __init__(self):
        self.lock = threading.Lock()
        self.attempts: list[tuple[float, str, dict]] = []
        self.counts: dict[str, int] = {}

    def seen(self, key: str) -> int:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            return self.counts[key]

    def times(self, word: str) -> list[float]:
        with self.lock:
            return [t for t, _, body in self.attempts if word in json.dumps(body)]


def make_handler(script: Script):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the killed `complete` run hung up

        def reply(self, status: int, body: dict, headers: dict | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def error(self, status: int, code: str, headers: dict | None = None) -> None:
            self.reply(status, {"error": {"message": f"scripted {code}", "type": "x",
                                          "param": None, "code": code}}, headers)

        def do_GET(self):
            if self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": "fake", "object": "model",
                                                             "created": 0, "owned_by": "test",
                                                             "max_model_len": MAX_MODEL_LEN}]})
            else:
                self.error(404, "not_found")

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            with script.lock:
                script.attempts.append((time.monotonic(), self.path, body))
            text = json.dumps(body)
            if self.path == "/tokenize":
                # One token per 4 characters, like a rough tokenizer.
                self.reply(200, {"tokens": list(range(len(body.get("content", "")) // 4))})
                return
            if "retry429" in text and script.seen("retry429") <= 2:
                return self.error(429, "rate_limit_exceeded", {"Retry-After": "1"})
            if "chat429" in text and script.seen("chat429") <= 1:
                return self.error(429, "rate_limit_exceeded", {"Retry-After": "1"})
            if "retryms" in text and script.seen("retryms") <= 1:
                return self.error(429, "rate_limit_exceeded", {"retry-after-ms": "1500"})
            if "retry503" in text and script.seen("retry503") <= 2:
                return self.error(503, "server_overloaded")
            if "quota" in text:
                return self.error(429, "insufficient_quota", {"x-should-retry": "false"})
            if "bad" in text:
                return self.error(400, "invalid_value")
            if "slow" in text:
                time.sleep(0.3)
            if self.path == "/v1/chat/completions" and body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in ["Hello", " from", " fake"]:
                    event = "data: " + json.dumps({"choices": [{"index": 0, "delta": {
                        "content": piece}}]}) + "\n\n"
                    self.wfile.write(f"{len(event):x}\r\n{event}\r\n".encode())
                    self.wfile.flush()
                done = "data: [DONE]\n\n"
                self.wfile.write(f"{len(done):x}\r\n{done}\r\n0\r\n\r\n".encode())
                return
            self.reply(200, {"id": "x", "object": "text_completion",
                             "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]})
    return Handler


def start_fake() -> tuple[ThreadingHTTPServer, Script]:
    script = Script()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(script))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, script


def write_lines(path: str, lines: list[dict]) -> None:
    Path(path).write_text("".join(json.dumps(line) + "\n" for line in lines))


def read_results(path: str) -> dict[str, dict]:
    results = {}
    for line in Path(path).read_text().splitlines():
        entry = json.loads(line)
        results.setdefault(entry["custom_id"], []).append(entry)
    return results


def test_complete_retries(tachyon: str, url: str, script: Script, temp: str) -> None:
    requests = [{"custom_id": name, "body": {"prompt": name, "max_tokens": 1}}
                for name in ("retry429", "retryms", "retry503", "quota", "bad", "fine")]
    source, output = os.path.join(temp, "retries.jsonl"), os.path.join(temp, "retries.out.jsonl")
    write_lines(source, requests)
    result = subprocess.run([tachyon, "complete", "--url", url, "--input", source, "--output",
                             output, "--model", "fake", "-j", "6"], capture_output=True, text=True,
                            timeout=120)
    results = read_results(output)
    status = {k: v[0]["response"]["status_code"] if v[0]["response"] else None
              for k, v in results.items()}
    info(f"statuses {status}")
    check("complete: every line has one result", sorted(results) == sorted(
        r["custom_id"] for r in requests) and all(len(v) == 1 for v in results.values()), results)
    check("complete: exit code 1 and a message when some lines failed",
          result.returncode == 1 and "2 of 6" in result.stderr, result.stderr[-300:])
    gaps = lambda t: [b - a for a, b in zip(t, t[1:])]  # noqa: E731
    t429, tms, t503 = script.times("retry429"), script.times("retryms"), script.times("retry503")
    check("429 with Retry-After: 1 waited out (3 attempts, >= 1 s apart), then 200",
          status["retry429"] == 200 and len(t429) == 3 and min(gaps(t429)) >= 0.95, gaps(t429))
    check("429 with retry-after-ms: 1500 waited 1.5 s (not the 0.5 s backoff), then 200",
          status["retryms"] == 200 and len(tms) == 2 and gaps(tms)[0] >= 1.45, gaps(tms))
    check("503 retried with backoff, then 200",
          status["retry503"] == 200 and len(t503) == 3 and min(gaps(t503)) >= 0.35, gaps(t503))
    check("insufficient_quota given up after one attempt",
          status["quota"] == 429 and len(script.times("quota")) == 1 and
          results["quota"][0]["error"]["code"] == "insufficient_quota", results["quota"])
    check("400 not retried", status["bad"] == 400 and len(script.times('"bad"')) == 1)
    fine = results["fine"][0]
    check("results are OpenAI batch output lines",
          set(fine) >= {"id", "custom_id", "response", "error"} and fine["error"] is None and
          fine["response"]["body"]["choices"][0]["text"] == "ok", fine)


def test_complete_resume(tachyon: str, url: str, script: Script, temp: str) -> None:
    count = 30
    source, output = os.path.join(temp, "resume.jsonl"), os.path.join(temp, "resume.out.jsonl")
    write_lines(source, [{"prompt": f"slow {i}", "max_tokens": 1} for i in range(count)])
    argv = [tachyon, "complete", "--url", url, "--input", source, "--output", output,
            "--model", "fake", "-j", "2"]
    before = len(script.times("slow"))
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.6)
    process.send_signal(signal.SIGKILL)
    process.wait()
    partial = Path(output).read_text().count("\n")
    info(f"killed after {partial} of {count} results")
    check("the killed run finished some lines but not all", 0 < partial < count, partial)
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    results = read_results(output)
    sent = len(script.times("slow")) - before
    check("the resumed run completes the batch: every line exactly once",
          again.returncode == 0 and len(results) == count and
          all(len(v) == 1 for v in results.values()), (again.returncode, again.stderr[-300:]))
    check("only lines in flight at the kill were sent twice", count <= sent <= count + 2,
          (sent, count))
    check("the resumed run says how many were done earlier", "done earlier" in again.stderr and
          f"{partial} done earlier" in again.stderr, again.stderr[:300])


def test_chat(tachyon: str, url: str, script: Script) -> None:
    conversation = "first question chat429\nsecond question " + "x" * 120 + "\nthird\n"
    before = len(script.attempts)
    result = subprocess.run([tachyon, "chat", "--url", url, "-n", "8"], input=conversation,
                            capture_output=True, text=True, timeout=120)
    check("chat --url streams the replies", result.returncode == 0 and
          result.stdout.count("Hello from fake") == 3, (result.returncode, result.stdout,
                                                       result.stderr[-300:]))
    check("chat --url waits out a 429 and says so", "(retrying in" in result.stderr and
          "HTTP 429" in result.stderr, result.stderr[-300:])
    with script.lock:
        chats = [body for _, path, body in script.attempts[before:]
                 if path == "/v1/chat/completions"]
    last = chats[-1]["messages"]
    check("chat --url leaves out the oldest turns once /tokenize says they no longer fit",
          "left out" in result.stderr and all("first question" not in m["content"] for m in last)
          and last[-1]["content"] == "third", (result.stderr[-300:], last))


def test_real_server(tachyon: str, model_path: str | None, temp: str) -> None:
    key = "sk-client-test"
    with TachyonServer(tachyon, model_path, ["-t", "2", "-c", "2048", "--api-key", key]) as server:
        source, output = os.path.join(temp, "real.jsonl"), os.path.join(temp, "real.out.jsonl")
        write_lines(source, [{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
                             {"prompt": "The sky is", "max_tokens": 4}])
        model = server.get_json("/health")[1]["models"][0]["id"]
        result = subprocess.run([tachyon, "complete", "--url", server.v1, "--input", source,
                                 "--output", output, "--model", model, "--api-key", key],
                                capture_output=True, text=True, timeout=120)
        results = read_results(output)
        check("complete against tachyon serve with an API key",
              result.returncode == 0 and len(results) == 2 and
              all(v[0]["response"]["status_code"] == 200 for v in results.values()),
              (result.stderr[-300:], results))
        chat = subprocess.run([tachyon, "chat", "--url", server.url, "--api-key", key, "-n", "6",
                               "--temperature", "0"], input="Hello!\n", capture_output=True,
                              text=True, timeout=120)
        check("chat --url against tachyon serve", chat.returncode == 0 and
              len(chat.stdout.strip()) > 0, (chat.stdout, chat.stderr[-300:]))
        wrong = subprocess.run([tachyon, "chat", "--url", server.url, "--api-key", "nope"],
                               input="Hello!\n", capture_output=True, text=True, timeout=60)
        check("chat --url with a wrong key fails at once with the server's 401 message",
              wrong.returncode != 0 and "401" in wrong.stderr, wrong.stderr[-300:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    server, script = start_fake()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory(prefix="tachyon-client-") as temp:
        section("complete: retries", test_complete_retries, args.tachyon, url, script, temp)
        section("complete: resume", test_complete_resume, args.tachyon, url, script, temp)
        section("chat --url", test_chat, args.tachyon, url, script)
        section("against tachyon serve", test_real_server, args.tachyon, args.model, temp)
    server.shutdown()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
