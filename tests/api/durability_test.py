#!/usr/bin/env python3
"""The usage ledger survives `kill -9` under load: no finished request lost or counted twice, and
quotas carry on after a restart.

1. A key `quota` spends some tokens in a few requests; its --daily-tokens is then set (with
   `keys update`, while the server runs) to what it spent + 1: one more request may start.
2. 8 clients (streaming and not, chat and completions, two keys) run short requests without
   pause; each request the client saw finish (200 and, when streaming, a usage chunk and
   [DONE]) is recorded with its x-request-id, response id and usage.
3. kill -9 in the middle of that load, sent by the client thread the moment it has seen a
   request finish (so a server that answers before its ledger row is committed loses that
   row); restart on the same --db. Twice: the first kill follows a streamed request's [DONE],
   the second a non-streaming response.
4. The ledger (read with sqlite3, table `usage`) holds every client-observed request exactly
   once with the tokens the client was told; `tachyon usage --json` agrees, and has at most one
   extra row per request that was in flight at the kill.
5. `quota` gets exactly one more request through, then 429 insufficient_quota
   (x-should-retry: false): the daily counter was rebuilt from the ledger, neither lost nor
   doubled. The load keys still work and each new request adds exactly one row.

    .venv/bin/python tests/api/durability_test.py --tachyon build/tachyon [--model M.gguf]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_fixture import TachyonServer  # noqa: E402
from gateway_util import KeysCli, bearer, error_of, httpx  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8
LOAD_KEYS = ("alpha", "beta")
KILL_AFTER_FINISHED = 30  # requests the clients saw finish in a round before its kill
KILL_AFTER_SECONDS = 30.0  # or this long, whichever comes first

from checks import results, check, info, section, exit_status  # noqa: E402


class Finished:
    """One request the client saw complete."""

    def __init__(self, key: str, request_id: str | None, response_id: str | None, usage: dict,
                 stream: bool):
        self.key = key
        self.request_id = request_id
        self.response_id = response_id
        self.prompt = usage.get("prompt_tokens", -1)
        self.completion = usage.get("completion_tokens", -1)
        self.stream = stream

    def __repr__(self) -> str:
        return (f"<{self.key} {self.request_id} {self.response_id} {self.prompt}+"
                f"{self.completion}{' stream' if self.stream else ''}>")


def one_request(client, model: str, key: str, secret: str, stream: bool, chat: bool,
                max_tokens: int, n: int) -> Finished | None:
    """Sends one request; the Finished record if the client saw it complete, else None."""
    if chat:
        path = "/v1/chat/completions"
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0.7,
                "messages": [{"role": "user", "content": f"Tell me fact number {n} about cats."}]}
    else:
        path = "/v1/completions"
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0.7,
                "prompt": f"Fact {n} about the sea:"}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        with client.stream("POST", path, json=body, headers=bearer(secret)) as response:
            if response.status_code != 200:
                response.read()
                return None
            request_id = response.headers.get("x-request-id")
            usage, done, finished, response_id = None, False, False, None
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data.strip() == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                response_id = chunk.get("id", response_id)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if any(c.get("finish_reason") for c in chunk.get("choices", [])):
                    finished = True
            if done and finished and usage:
                return Finished(key, request_id, response_id, usage, True)
            return None
    response = client.post(path, json=body, headers=bearer(secret))
    if response.status_code != 200:
        return None
    payload = response.json()
    return Finished(key, response.headers.get("x-request-id"), payload.get("id"),
                    payload.get("usage") or {}, False)


class Load:
    """CLIENTS threads sending requests back to back until stop() (or the server dies)."""

    def __init__(self, url: str, model: str, secrets: dict[str, str], on_finish=None):
        self.url = url
        self.on_finish = on_finish  # called with each Finished (and the count) by its thread
        self.model = model
        self.secrets = secrets
        self.finished: list[Finished] = []
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(CLIENTS)]

    def start(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def count(self) -> int:
        with self.lock:
            return len(self.finished)

    def _client(self, index: int) -> None:
        rng = random.Random(index)
        key = LOAD_KEYS[index % len(LOAD_KEYS)]
        n = 0
        with httpx.Client(base_url=self.url, timeout=120) as client:
            while not self.stopping.is_set():
                n += 1
                try:
                    done = one_request(client, self.model, key, self.secrets[key],
                                       stream=index % 2 == 0, chat=index % 4 < 2,
                                       max_tokens=rng.randint(2, 24), n=index * 1000 + n)
                except (httpx.HTTPError, ValueError) as error:
                    done = None
                    with self.lock:
                        self.failures.append(f"client {index}: {type(error).__name__}")
                    time.sleep(0.05)
                if done:
                    with self.lock:
                        self.finished.append(done)
                        count = len(self.finished)
                    if self.on_finish:
                        self.on_finish(done, count)


def ledger_rows(db: Path) -> list[dict]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        connection.row_factory = sqlite3.Row
        return [dict(row) for row in connection.execute("SELECT * FROM usage ORDER BY id")]
    finally:
        connection.close()


def usage_by_key(cli: KeysCli) -> dict[str, dict]:
    return {row["key"]: row for row in cli.usage("--by", "key")}


def run(tachyon: str, model: str | None, work: Path) -> None:
    db = work / "tachyon.db"
    cli = KeysCli(tachyon, str(db))
    secrets = {name: cli.create(name, rpm=0, tpm=0, concurrency=0)["key"]
               for name in (*LOAD_KEYS, "quota")}
    server = TachyonServer(tachyon, model, check_exit=False,
                           args=["-c", "2048", "--auth", "db", "--db", str(db)])
    with server:
        http = httpx.Client(base_url=server.url, timeout=120)
        model_id = http.get("/v1/models", headers=bearer(secrets["alpha"])).json()["data"][0]["id"]

        # 1. The quota key spends a little, then gets a quota of that + 1.
        spent = 0
        for n in range(3):
            done = one_request(http, model_id, "quota", secrets["quota"], stream=n == 1,
                               chat=True, max_tokens=8, n=n)
            check(f"quota key: request {n + 1} of 3 before the kill finishes", done, done)
            if done:
                spent += done.prompt + done.completion
        cli.update("quota", daily_tokens=spent + 1)
        info(f"quota key spent {spent} tokens; its daily quota is now {spent + 1}")

        # 2./3. Load, kill -9 in the middle of it, restart; twice.
        finished: list[Finished] = []
        for round_index, after_stream in enumerate((True, False)):
            pid = server.process.pid
            killed = threading.Event()

            def kill_now(done: Finished, count: int, pid=pid, killed=killed,
                         after_stream=after_stream) -> None:
                if count >= KILL_AFTER_FINISHED and done.stream == after_stream and \
                        not killed.is_set():
                    killed.set()
                    os.kill(pid, signal.SIGKILL)

            load = Load(server.url, model_id, secrets, on_finish=kill_now).start()
            start = time.monotonic()
            killed.wait(timeout=KILL_AFTER_SECONDS)
            server.kill9()
            killed_after = time.monotonic() - start
            load.stop()
            kind = "streamed" if after_stream else "non-streaming"
            when = f"right after a {kind} request finished" if killed.is_set() else \
                "on the timeout"
            info(f"round {round_index + 1}: kill -9 after {killed_after:.1f} s ({when}) "
                 f"with {len(load.finished)} requests finished "
                 f"({sum(f.stream for f in load.finished)} streamed); {len(load.failures)} "
                 f"client errors after the kill")
            check(f"round {round_index + 1}: the clients saw requests finish before the kill",
                  len(load.finished) >= 10, len(load.finished))
            finished += load.finished
            server.restart()
        http = httpx.Client(base_url=server.url, timeout=120)
        check("every finished request had an x-request-id",
              all(f.request_id for f in finished), [f for f in finished if not f.request_id][:3])

        # 4. The ledger holds each client-observed request exactly once.
        rows = ledger_rows(db)
        by_request_id: dict[str, list[dict]] = {}
        for row in rows:
            by_request_id.setdefault(row["request_id"], []).append(row)
        use_id = "x-request-id"
        if finished and not any(f.request_id in by_request_id for f in finished) and \
                any(f.response_id in by_request_id for f in finished):
            use_id = "response id"
        info(f"ledger rows are keyed by the {use_id}")

        def key_of(f: Finished) -> str | None:
            return f.request_id if use_id == "x-request-id" else f.response_id

        missing = [f for f in finished if len(by_request_id.get(key_of(f), [])) == 0]
        doubled = [f for f in finished if len(by_request_id.get(key_of(f), [])) > 1]
        check("every request the clients saw finish is in the ledger",
              not missing, f"{len(missing)} missing, e.g. {missing[:5]}")
        check("none of them is there twice", not doubled, doubled[:5])
        wrong = []
        for f in finished:
            found = by_request_id.get(key_of(f), [])
            if len(found) == 1:
                row = found[0]
                if (row["key_name"], row["prompt_tokens"], row["completion_tokens"],
                        row["status"]) != (f.key, f.prompt, f.completion, "ok"):
                    wrong.append((f, {k: row[k] for k in ("key_name", "prompt_tokens",
                                                          "completion_tokens", "status")}))
        check("each ledger row has the key, status ok and the tokens the client was told",
              not wrong, wrong[:5])
        seen = {key_of(f) for f in finished}
        extra = [row for row in rows if row["key_name"] in LOAD_KEYS and
                 row["request_id"] not in seen]
        info(f"{len(extra)} ledger rows for requests the clients did not see finish "
             f"(in flight at the kill): {[(r['status'], r['completion_tokens']) for r in extra]}")
        check(f"at most {2 * CLIENTS} extra rows (one per request in flight at each kill)",
              len(extra) <= 2 * CLIENTS, len(extra))

        usage = usage_by_key(cli)
        for key in LOAD_KEYS:
            mine = [f for f in finished if f.key == key]
            extra_mine = [r for r in extra if r["key_name"] == key]
            row = usage.get(key, {})
            expected = (len(mine) + len(extra_mine),
                        sum(f.prompt for f in mine) + sum(r["prompt_tokens"] for r in extra_mine),
                        sum(f.completion for f in mine) +
                        sum(r["completion_tokens"] for r in extra_mine))
            check(f"usage --json {key}: requests and tokens = observed + in-flight rows",
                  (row.get("requests"), row.get("prompt_tokens"), row.get("completion_tokens"))
                  == expected, f"{row} vs {expected}")

        # 5. The quota carries on: exactly one more request, then insufficient_quota.
        done = one_request(http, model_id, "quota", secrets["quota"], stream=False, chat=True,
                           max_tokens=4, n=99)
        check("after the restart the nearly-spent quota key gets one more request", done,
              "refused: the restart counted more than was spent")
        response = http.post("/v1/chat/completions", headers=bearer(secrets["quota"]),
                             json={"model": model_id, "max_tokens": 4,
                                   "messages": [{"role": "user", "content": "Hi"}]})
        error = error_of(response)
        check("… and then 429 insufficient_quota with x-should-retry: false",
              response.status_code == 429 and error.get("type") == "insufficient_quota" and
              error.get("code") == "insufficient_quota" and
              response.headers.get("x-should-retry") == "false",
              f"{response.status_code} {response.text[:300]} {dict(response.headers)}")
        row = usage_by_key(cli).get("quota", {})
        check("usage: the quota key's 4 finished requests",
              row.get("requests", 0) - row.get("rejected", 0) == 4, row)

        # The load keys still work, and each new request adds one row.
        before = usage_by_key(cli)
        after_restart = []
        for n in range(4):
            done = one_request(http, model_id, "alpha", secrets["alpha"], stream=n % 2 == 0,
                               chat=n < 2, max_tokens=4, n=5000 + n)
            after_restart.append(done)
        check("after the restart the load keys' requests finish", all(after_restart),
              after_restart)
        after = usage_by_key(cli)
        check("… and add exactly 4 ledger rows",
              after.get("alpha", {}).get("requests", 0) -
              before.get("alpha", {}).get("requests", 0) == 4,
              f"{before.get('alpha')} → {after.get('alpha')}")
        if results["failed"]:
            server.dump_stderr("some checks failed", last_lines=60)
    check("the restarted server exits 0 on SIGTERM", server.returncode == 0, server.returncode)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", help="GGUF file (default: tachyon's default model)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tachyon-durability-test-"))
    try:
        section("durability", run, args.tachyon, args.model, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
