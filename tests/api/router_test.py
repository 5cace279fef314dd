#!/usr/bin/env python3
"""`tachyon router` over `tachyon serve` replicas, driven with the official openai client, httpx
and raw sockets (issue 29).

1. Same as one server: three replicas (two serve the default model, one the same file under the
   id "code") behind a cache-aware router, API keys from one shared database. Answers, streams,
   errors (status, body, retry headers) and x-request-id through the router equal a replica's
   own; /v1/models is the union; a model's requests go only to the replicas serving it; a key
   revoked in the database is refused through the router within a second.
2. A client that hangs up mid-stream is cancelled on its replica.
3. kill -9 of a replica under load: streams it was serving end with an error event and no
   [DONE], every other request succeeds (the non-streamed ones it held are retried elsewhere),
   new requests go to the others, the ledger has exactly one row per answered request and none
   twice; started again on its port, the replica is probed back in.
4. Retry before the first byte: a router that has not noticed a replica died (long health
   interval) still answers every request, through another replica.
5. SIGTERM to the router mid-stream: the stream completes, the router exits 0.
6. Prefix-cache hit rate of a workload of conversations sharing system prompts: one server,
   two replicas behind the cache-aware router (must be within 10% of one server) and behind
   round-robin (printed for comparison).
7. `tachyon serve --replicas 2`: one endpoint, both children up, children gone after SIGTERM.

    .venv/bin/python tests/api/router_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai client in .venv ships its HTTP library as httpx2
    import httpx2 as httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from gateway_util import KeysCli, bearer, error_of  # noqa: E402
from server_fixture import TachyonRouter, TachyonServer, metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT.parent / "shared/data/corpus/tinyshakespeare.txt"
# Small and single-threaded: three replicas share the machine's cores.
REPLICA_ARGS = ["-t", "1", "-c", "2048", "--kv-cache-mem", "192MiB"]
RUNNING = "tachyon:num_requests_running"


def chat_body(model: str, text: str, max_tokens: int = 8, stream: bool = False, **extra) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens, "temperature": 0}
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


def sse_events(response) -> list[str]:
    """The data: payloads of a streamed response, in order."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[6:])
    return events


def router_counter(router: TachyonRouter, name: str, replica: str | None = None) -> float:
    text = httpx.get(router.url + "/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if replica is not None and f'replica="{replica}"' not in line:
                continue
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- 1. the same as one server ------------------------------------------------------------------

def test_same_as_single_server(router: TachyonRouter, replica: TachyonServer, key: str,
                               limited_key: str, model: str) -> None:
    headers = bearer(key)
    via_router = openai.OpenAI(base_url=router.v1, api_key=key, max_retries=0)
    direct = openai.OpenAI(base_url=replica.v1, api_key=key, max_retries=0)
    messages = [{"role": "user", "content": "Name three colours."}]
    a = via_router.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                           temperature=0)
    b = direct.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                       temperature=0)
    check("chat answer through the router equals the replica's", a.choices[0].message.content ==
          b.choices[0].message.content and a.choices[0].finish_reason == b.choices[0].finish_reason,
          (a.choices[0].message.content, b.choices[0].message.content))
    check("usage through the router equals the replica's",
          (a.usage.prompt_tokens, a.usage.completion_tokens) ==
          (b.usage.prompt_tokens, b.usage.completion_tokens), (a.usage, b.usage))

    def stream_text(client) -> tuple[str, int, object]:
        text, chunks, usage = "", 0, None
        for chunk in client.chat.completions.create(
                model=model, messages=messages, max_tokens=16, temperature=0, stream=True,
                stream_options={"include_usage": True}):
            chunks += 1
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage:
                usage = chunk.usage
        return text, chunks, usage
    (text_a, chunks_a, usage_a), (text_b, chunks_b, usage_b) = stream_text(via_router), \
        stream_text(direct)
    check("streamed text and chunk count through the router equal the replica's",
          (text_a, chunks_a) == (text_b, chunks_b), ((text_a, chunks_a), (text_b, chunks_b)))
    check("the stream's usage chunk arrives through the router",
          usage_a is not None and usage_a.completion_tokens == usage_b.completion_tokens,
          (usage_a, usage_b))

    with httpx.Client(timeout=60) as client:
        with client.stream("POST", router.v1 + "/chat/completions", headers=headers,
                           json=chat_body(model, "Hi", 4, stream=True)) as response:
            content_type = response.headers.get("content-type", "")
            events = sse_events(response)
        check("a raw stream is text/event-stream and ends with [DONE]",
              content_type.startswith("text/event-stream") and events[-1:] == ["[DONE]"],
              (content_type, events[-2:]))

        # Errors: status, body and the headers that steer retries, as the replica gives them.
        cases = [
            ("bad JSON", "POST", "/v1/chat/completions", b"{not json", headers),
            ("wrong type", "POST", "/v1/chat/completions",
             json.dumps(chat_body(model, "x", temperature="hot")).encode(), headers),
            ("unknown model", "POST", "/v1/chat/completions",
             json.dumps(chat_body("no-such-model", "x")).encode(), headers),
            ("no messages", "POST", "/v1/chat/completions",
             json.dumps({"model": model}).encode(), headers),
            ("unknown route", "GET", "/v1/nothing-here", b"", headers),
            ("wrong method", "DELETE", "/v1/chat/completions", b"", headers),
            ("no API key", "POST", "/v1/chat/completions",
             json.dumps(chat_body(model, "x")).encode(), {}),
            ("wrong API key", "GET", "/v1/models", b"", bearer("sk-tachyon-wrong")),
        ]
        for name, method, path, body, case_headers in cases:
            request_headers = {"Content-Type": "application/json", **case_headers}
            got = client.request(method, router.url + path, content=body, headers=request_headers)
            want = client.request(method, replica.url + path, content=body,
                                  headers=request_headers)
            same_headers = all(got.headers.get(h) == want.headers.get(h)
                               for h in ("content-type", "allow", "retry-after", "x-should-retry"))
            check(f"error '{name}' through the router equals the replica's "
                  f"({want.status_code})",
                  got.status_code == want.status_code and error_of(got) == error_of(want) and
                  same_headers and want.status_code >= 400,
                  (got.status_code, got.text[:200], want.status_code, want.text[:200]))

        response = client.post(router.v1 + "/chat/completions", headers={
            **headers, "X-Request-Id": "router-test-id-1"}, json=chat_body(model, "Hi", 2))
        check("x-request-id is the client's through the router",
              response.headers.get("x-request-id") == "router-test-id-1",
              dict(response.headers))
        limited = bearer(limited_key)
        got = client.post(router.v1 + "/chat/completions", headers=limited,
                          json=chat_body(model, "Hi", 2))
        want = client.post(replica.v1 + "/chat/completions", headers=limited,
                           json=chat_body(model, "Hi", 2))
        names = {name for name in want.headers if name.startswith("x-ratelimit-")}
        check("a limited key's x-ratelimit-* headers pass through the router",
              len(names) == 6 and all(got.headers.get(name) is not None for name in names) and
              got.headers["x-ratelimit-limit-requests"] == want.headers[
                  "x-ratelimit-limit-requests"], (dict(got.headers), dict(want.headers)))
        listed = client.get(router.v1 + "/models", headers=headers).json()
        ids = sorted(entry["id"] for entry in listed.get("data", []))
        check("/v1/models through the router lists every replica's models once",
              ids == sorted([model, "code"]), listed)
        one = client.get(router.v1 + "/models/code", headers=headers)
        check("/v1/models/{id} reaches a replica serving it",
              one.status_code == 200 and one.json().get("id") == "code", one.text)
    try:
        via_router.chat.completions.create(model="no-such-model", messages=messages, max_tokens=2)
        check("the openai client raises NotFoundError for an unknown model", False, "no error")
    except openai.NotFoundError as error:
        check("the openai client raises NotFoundError for an unknown model",
              error.code == "model_not_found", error)


def test_model_routing(router: TachyonRouter, replicas: list[TachyonServer], key: str) -> None:
    code_url = replicas[2].url
    before = {r.url: router_counter(router, "tachyon:router_replica_requests_total", r.url)
              for r in replicas}
    client = openai.OpenAI(base_url=router.v1, api_key=key, max_retries=0)
    for i in range(4):
        client.chat.completions.create(model="code", max_tokens=2, temperature=0,
                                       messages=[{"role": "user", "content": f"def f{i}():"}])
    after = {r.url: router_counter(router, "tachyon:router_replica_requests_total", r.url)
             for r in replicas}
    sent = {url: after[url] - before[url] for url in after}
    check("every request for model 'code' went to the one replica serving it",
          sent[code_url] == 4 and sum(sent.values()) == 4, sent)


def test_revoked_key(router: TachyonRouter, keys: KeysCli, model: str) -> None:
    victim = keys.create("router-victim", rpm=0, tpm=0, concurrency=0)["key"]
    with httpx.Client(timeout=60) as client:
        ok = [client.post(router.v1 + "/chat/completions", headers=bearer(victim),
                          json=chat_body(model, f"hello {i}", 2)).status_code for i in range(3)]
        check("a new key works through the router", ok == [200] * 3, ok)
        keys.revoke("router-victim")
        revoked_at = time.monotonic()
        time.sleep(1.05)
        statuses = [client.post(router.v1 + "/chat/completions", headers=bearer(victim),
                                json=chat_body(m, f"again {i}", 2)).status_code
                    for i, m in enumerate([model, model, "code", model, model, "code"])]
        check("a revoked key is refused through the router on every replica within a second",
              statuses == [401] * 6, (statuses, time.monotonic() - revoked_at))


# -- 2. hang-ups ------------------------------------------------------------------------------

def test_hangup_cancels(router: TachyonRouter, replicas: list[TachyonServer], key: str,
                        model: str) -> None:
    before = router_counter(router, "tachyon:router_client_hangups_total")
    body = json.dumps(chat_body(model, "Tell a very long story.", 1500, stream=True,
                                ignore_eos=True)).encode()
    with socket.create_connection(("127.0.0.1", router.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nAuthorization: Bearer " + key.encode() +
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = b""
        while received.count(b"data: ") < 4:
            piece = sock.recv(4096)
            if not piece:
                break
            received += piece
    check("the stream started through the router", received.count(b"data: ") >= 4,
          received[:200])
    deadline = time.monotonic() + 10
    running = None
    while time.monotonic() < deadline:
        running = sum(metrics(r.url, headers=bearer(key)).get(RUNNING, 0) for r in replicas)
        if running == 0:
            break
        time.sleep(0.1)
    check("the replica cancelled the request of the client that hung up", running == 0, running)
    check("the router counted the hang-up",
          router_counter(router, "tachyon:router_client_hangups_total") > before)
    check("a hang-up is not the replica's failure: every replica stays up",
          router_counter(router, "tachyon:router_replica_failures_total") == 0 and
          router.health().get("replicas_up") == len(replicas), router.health())


# -- 3. kill -9 under load --------------------------------------------------------------------

def test_kill_replica(router: TachyonRouter, replicas: list[TachyonServer], key: str, model: str,
                      db_path: str) -> None:
    streams: dict[int, dict] = {}
    whole: dict[int, int] = {}
    first_events = [threading.Event() for _ in range(6)]

    def stream(index: int) -> None:
        outcome = {"events": [], "status": 0}
        streams[index] = outcome
        try:
            with httpx.Client(timeout=120) as client:
                with client.stream("POST", router.v1 + "/chat/completions", headers={
                        **bearer(key), "X-Request-Id": f"kill-stream-{index}"},
                        json=chat_body(model, f"Story number {index}:", 300, stream=True,
                                       ignore_eos=True)) as response:
                    outcome["status"] = response.status_code
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            outcome["events"].append(line[6:])
                            first_events[index].set()
        except Exception as error:  # noqa: BLE001
            outcome["exception"] = repr(error)
        finally:
            first_events[index].set()

    def ask(index: int) -> None:
        with httpx.Client(timeout=180) as client:
            response = client.post(router.v1 + "/chat/completions", headers={
                **bearer(key), "X-Request-Id": f"kill-whole-{index}"},
                json=chat_body(model, f"Essay number {index}:", 120, ignore_eos=True))
            whole[index] = response.status_code

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for event in first_events:  # every stream is running
        event.wait(timeout=120)
    whole_threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for thread in whole_threads:
        thread.start()
    time.sleep(0.5)
    victim = replicas[0]
    victim.kill9()
    info(f"killed replica {victim.url} with 6 streams and 3 whole requests in flight")
    for thread in threads + whole_threads:
        thread.join(timeout=300)

    completed = [i for i, s in streams.items() if s["events"][-1:] == ["[DONE]"]]
    broken = [i for i, s in streams.items() if s["events"][-1:] != ["[DONE]"]]
    broken_ok = all(s["status"] == 200 and s["events"] and
                    json.loads(s["events"][-1]).get("error", {}).get("code") == "replica_failed"
                    for i, s in streams.items() if i in broken)
    info(f"streams completed {completed}, ended by the kill {broken}")
    check("streams on the killed replica ended with an error event and no [DONE]",
          len(broken) >= 1 and broken_ok,
          {i: (streams[i]["status"], streams[i]["events"][-1:], streams[i].get("exception"))
           for i in broken})
    check("the other streams completed", len(completed) + len(broken) == 6 and len(completed) >= 3,
          (completed, broken))
    check("every non-streamed request in flight succeeded (retried elsewhere if it was there)",
          sorted(whole.values()) == [200, 200, 200], whole)
    with httpx.Client(timeout=60) as client:
        after = [client.post(router.v1 + "/chat/completions", headers=bearer(key),
                             json=chat_body(model, f"after {i}", 2)).status_code for i in range(6)]
    check("new requests after the kill all succeed", after == [200] * 6, after)
    check("the router took the killed replica out",
          router_counter(router, "tachyon:router_replica_up", victim.url) == 0)

    # The ledger: one row per answered request, none twice, none for the broken streams.
    with sqlite3.connect(db_path) as db:
        rows = [row[0] for row in db.execute("SELECT request_id FROM usage")]
    def rows_of(prefix: str) -> int:
        return sum(1 for r in rows if r.split("#")[0] == prefix)
    stream_rows = {i: rows_of(f"kill-stream-{i}") for i in range(6)}
    whole_rows = {i: rows_of(f"kill-whole-{i}") for i in range(3)}
    check("each completed stream has exactly one ledger row",
          all(stream_rows[i] == 1 for i in completed), stream_rows)
    check("streams cut by the kill have no ledger row (nothing charged twice)",
          all(stream_rows[i] == 0 for i in broken), stream_rows)
    check("each retried non-streamed request has exactly one ledger row",
          all(count == 1 for count in whole_rows.values()), whole_rows)
    check("no request id appears twice in the ledger", len(rows) == len(set(rows)))

    victim.start()  # same port
    try:
        router.wait_replicas_up(3, timeout=15)
        check("the restarted replica is probed back in", True)
    except Exception as error:  # noqa: BLE001
        check("the restarted replica is probed back in", False, error)


# -- 4. retry before the first byte -----------------------------------------------------------

def test_retry_unnoticed_death(tachyon: str, replicas: list[TachyonServer], key: str,
                               model: str) -> None:
    with TachyonRouter(tachyon, [r.url for r in replicas[:2]],
                       ["--health-interval", "600", "--routing", "round-robin"]) as router:
        victim = replicas[1]
        victim.kill9()
        with httpx.Client(timeout=60) as client:
            statuses = [client.post(router.v1 + "/chat/completions", headers=bearer(key),
                                    json=chat_body(model, f"retry {i}", 2)).status_code
                        for i in range(6)]
        check("every request succeeds while the router has not noticed a dead replica",
              statuses == [200] * 6, statuses)
        check("the router retried on the other replica and took the dead one out",
              router_counter(router, "tachyon:router_retries_total") >= 1 and
              router_counter(router, "tachyon:router_replica_up", victim.url) == 0)
        victim.start()


# -- 5. drain ---------------------------------------------------------------------------------

def test_router_drain(tachyon: str, replicas: list[TachyonServer], key: str, model: str) -> None:
    router = TachyonRouter(tachyon, [r.url for r in replicas[:2]]).start()
    events: list[str] = []

    def stream() -> None:
        with httpx.Client(timeout=120) as client:
            with client.stream("POST", router.v1 + "/chat/completions", headers=bearer(key),
                               json=chat_body(model, "Count slowly:", 60, stream=True,
                                              ignore_eos=True)) as response:
                events.extend(sse_events(response))
    thread = threading.Thread(target=stream)
    thread.start()
    time.sleep(0.7)
    code = router.stop()
    thread.join(timeout=120)
    check("a stream running when the router got SIGTERM completed", events[-1:] == ["[DONE]"],
          events[-2:])
    check("the router exited 0 after draining", code == 0, code)


# -- 6. cache-aware routing: prefix-cache hit rates -------------------------------------------

def conversation_workload(num_systems: int = 3, per_system: int = 2, turns: int = 3):
    """Conversations sharing long system prompts: (conversation, system prompt, user turns)."""
    text = SHAKESPEARE.read_text()
    systems = [f"You are assistant {i}. Background:\n" + text[i * 3000: i * 3000 + 1000]
               for i in range(num_systems)]
    conversations = []
    for s in range(num_systems):
        for c in range(per_system):
            users = [f"Question {t} of conversation {s}-{c}: who speaks next?"
                     for t in range(turns)]
            conversations.append((systems[s], users))
    return conversations


def run_workload(base_url: str, model: str) -> None:
    conversations = conversation_workload()
    histories = [[{"role": "system", "content": system}] for system, _ in conversations]
    turns = len(conversations[0][1])
    with httpx.Client(timeout=300) as client:
        for turn in range(turns):
            for index, (_, users) in enumerate(conversations):
                histories[index].append({"role": "user", "content": users[turn]})
                response = client.post(base_url + "/v1/chat/completions", json={
                    "model": model, "messages": histories[index], "max_tokens": 6,
                    "temperature": 0})
                response.raise_for_status()
                answer = response.json()["choices"][0]["message"]["content"]
                histories[index].append({"role": "assistant", "content": answer})


def hit_rate(urls: list[str]) -> float:
    hits = queried = 0.0
    for url in urls:
        values = metrics(url)
        hits += values.get("tachyon:prefix_cache_hits_total", 0)
        queried += values.get("tachyon:prefix_cache_queries_total", 0)
    return hits / queried if queried else 0.0


def test_cache_aware_hit_rate(tachyon: str, model_path: str | None) -> None:
    rates = {}
    with TachyonServer(tachyon, model_path, REPLICA_ARGS) as single:
        run_workload(single.url, model_of(single))
        rates["one server"] = hit_rate([single.url])
    for policy in ("cache-aware", "round-robin"):
        pair = [TachyonServer(tachyon, model_path, REPLICA_ARGS).start() for _ in range(2)]
        try:
            with TachyonRouter(tachyon, [r.url for r in pair], ["--routing", policy]) as router:
                run_workload(router.url, model_of(pair[0]))
            rates[policy] = hit_rate([r.url for r in pair])
        finally:
            for replica in pair:
                replica.stop()
    info("prefix-cache hit rate (tokens): " +
         ", ".join(f"{name} {rate:.3f}" for name, rate in rates.items()))
    check("cache-aware routing over 2 replicas keeps the hit rate within 10% of one server's",
          rates["cache-aware"] >= 0.9 * rates["one server"], rates)
    check("round-robin loses hits that cache-aware keeps (the comparison means something)",
          rates["round-robin"] < rates["cache-aware"], rates)


# -- 7. serve --replicas ----------------------------------------------------------------------

def child_pids(pid: int) -> list[int]:
    pids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        pids += [int(child) for child in children]
    return pids


def test_serve_replicas(tachyon: str, model_path: str | None) -> None:
    server = TachyonServer(tachyon, model_path, ["--replicas", "2", *REPLICA_ARGS[2:]])
    with server:
        deadline = time.monotonic() + 60
        health = {}
        while time.monotonic() < deadline:
            health = json.loads(httpx.get(server.url + "/health", timeout=5).text)
            if health.get("replicas_up") == 2:
                break
            time.sleep(0.2)
        check("serve --replicas 2: both children up behind one endpoint",
              health.get("replicas_up") == 2 and health.get("replicas") == 2, health)
        children = child_pids(server.process.pid)
        check("serve --replicas 2 runs two child processes", len(children) == 2, children)
        model = health["models"][0]["id"]
        response = httpx.post(server.v1 + "/chat/completions", json=chat_body(model, "Hi", 4),
                              timeout=60)
        check("a chat completion through serve --replicas", response.status_code == 200,
              response.text[:200])
    time.sleep(0.2)
    alive = [pid for pid in children if Path(f"/proc/{pid}").exists() and
             "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    check("serve --replicas exits 0 and stops its children", server.returncode == 0 and not alive,
          (server.returncode, alive))


def model_of(server: TachyonServer, key: str | None = None) -> str:
    status, body = server.get_json("/v1/models", headers=bearer(key))
    return body["data"][0]["id"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    tachyon = args.tachyon

    with tempfile.TemporaryDirectory(prefix="tachyon-router-") as temp:
        db_path = os.path.join(temp, "tachyon.db")
        keys = KeysCli(tachyon, db_path)
        key = keys.create("router-user", rpm=0, tpm=0, concurrency=0)["key"]
        limited_key = keys.create("router-limited", rpm=1000, tpm=1000000, concurrency=8)["key"]
        auth = ["--auth", "db", "--db", db_path]
        replicas = [TachyonServer(tachyon, args.model, REPLICA_ARGS + auth),
                    TachyonServer(tachyon, args.model, REPLICA_ARGS + auth),
                    TachyonServer(tachyon, args.model,
                                  REPLICA_ARGS + auth + ["--model-alias", "code"])]
        try:
            for replica in replicas:
                replica.start()
                replica.fixed_port = replica.port  # restarts keep the port
            model = model_of(replicas[0], key)
            with TachyonRouter(tachyon, [r.url for r in replicas],
                               ["--health-interval", "0.5"]) as router:
                section("same as one server", test_same_as_single_server, router, replicas[0],
                        key, limited_key, model)
                section("model routing", test_model_routing, router, replicas, key)
                section("revoked key", test_revoked_key, router, keys, model)
                section("hang-up", test_hangup_cancels, router, replicas, key, model)
                section("kill -9", test_kill_replica, router, replicas, key, model, db_path)
            section("retry before the first byte", test_retry_unnoticed_death, tachyon, replicas,
                    key, model)
            section("drain", test_router_drain, tachyon, replicas, key, model)
        finally:
            for replica in replicas:
                replica.stop()
    section("cache-aware hit rate", test_cache_aware_hit_rate, tachyon, args.model)
    section("serve --replicas", test_serve_replicas, tachyon, args.model)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
