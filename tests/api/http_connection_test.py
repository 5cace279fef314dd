#!/usr/bin/env python3
"""Connection management and request limits of `tachyon serve`, checked on raw sockets
(issue 22; RFC 9112): `Connection: close` ends the connection right after the response on
every kind of route, HTTP/1.0 gets HTTP/1.0 answers (no chunked encoding, keep-alive only when
asked), pipelined requests are answered in order, `Expect: 100-continue` works, and slow,
oversized or too many requests and connections get a clear answer (408, 413, 414, 417, 431,
505, 503) and are closed.

    .venv/bin/python tests/api/http_connection_test.py --tachyon build/tachyon [--model M.gguf]
"""
from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from raw_http import ConnectionClosed, RawHttp, request, sse_payloads  # noqa: E402
from server_fixture import TachyonServer, metrics, parse_prometheus  # noqa: E402

CTX = 2048
IDLE_TIMEOUT = 3.0
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
CLOSE_WITHIN = 0.1  # seconds from the last byte of a `close` response to the server's FIN
MODEL = {"id": ""}  # the served model's id, from /v1/models


def completion(stream: bool = False, max_tokens: int = 1, **extra) -> dict:
    body = {"model": MODEL["id"], "prompt": "The capital of France is", "max_tokens": max_tokens,
            "temperature": 0}
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


def chat(stream: bool = False, max_tokens: int = 4) -> dict:
    return {"model": MODEL["id"], "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}


def close_case(port: int, what: str, data: bytes, streaming: bool) -> None:
    with RawHttp(port) as client:
        client.send(data)
        response = client.read_response()
        gap = client.wait_closed(timeout=5.0)
    ok_body = response.status == 200 and response.complete
    if streaming:
        ok_body = ok_body and response.framing == "chunked" and \
            sse_payloads(response.body)[-1:] == ["[DONE]"]
    check(f"{what}: whole 200 response that says Connection: close",
          ok_body and response.header("connection").lower() == "close",
          f"{response.status} {response.headers} {response.body[-120:]!r}")
    check(f"{what}: the server closes within {CLOSE_WITHIN * 1000:.0f} ms of the last byte",
          gap is not None and gap <= CLOSE_WITHIN, f"gap {gap}")


def test_connection_close(port: int) -> None:
    close = {"Connection": "close"}
    close_case(port, "GET /health, Connection: close",
               request("GET", "/health", headers=close), streaming=False)
    close_case(port, "GET /v1/models, Connection: close",
               request("GET", "/v1/models", headers=close), streaming=False)
    close_case(port, "POST /v1/completions, Connection: close",
               request("POST", "/v1/completions", completion(), headers=close), streaming=False)
    close_case(port, "POST /v1/completions stream, Connection: close",
               request("POST", "/v1/completions", completion(stream=True, max_tokens=4),
                       headers=close), streaming=True)
    close_case(port, "POST /v1/chat/completions stream, Connection: close",
               request("POST", "/v1/chat/completions", chat(stream=True), headers=close),
               streaming=True)
    close_case(port, "POST /v1/chat/completions, Connection: close",
               request("POST", "/v1/chat/completions", chat(), headers=close), streaming=False)
    # An error answer closes the same way.
    with RawHttp(port) as client:
        client.send(request("POST", "/v1/completions", {"model": "any"}, headers=close))
        response = client.read_response()
        gap = client.wait_closed(timeout=5.0)
    check("a 400 with Connection: close: closed right after it",
          response.status == 400 and gap is not None and gap <= CLOSE_WITHIN,
          f"{response.status} gap {gap}")


def test_http10(port: int) -> None:
    with RawHttp(port) as client:
        client.send(request("GET", "/health", version="1.0"))
        response = client.read_response()
        gap = client.wait_closed(timeout=5.0)
    check("HTTP/1.0 GET /health: an HTTP/1.0 200 with Content-Length",
          response.version == "HTTP/1.0" and response.status == 200 and
          response.framing == "length" and response.complete, f"{response}")
    check("HTTP/1.0 without keep-alive: closed after the response",
          gap is not None and gap <= CLOSE_WITHIN, f"gap {gap}")

    with RawHttp(port) as client:
        client.send(request("POST", "/v1/completions", completion(stream=True, max_tokens=4),
                            version="1.0"))
        response = client.read_response()
        gap = client.wait_closed(timeout=5.0)
    check("HTTP/1.0 stream: no chunked encoding, the body ends with the connection",
          response.version == "HTTP/1.0" and response.framing == "close" and
          "transfer-encoding" not in response.headers and response.complete,
          f"{response.version} {response.headers}")
    check("HTTP/1.0 stream: SSE events through data: [DONE]",
          sse_payloads(response.body)[-1:] == ["[DONE]"] and len(sse_payloads(response.body)) >= 3,
          response.body[-200:])
    check("HTTP/1.0 stream: Connection: close", response.header("connection").lower() == "close",
          response.headers)

    keep = {"Connection": "keep-alive"}
    with RawHttp(port) as client:
        client.send(request("GET", "/health", version="1.0", headers=keep))
        first = client.read_response()
        client.send(request("POST", "/v1/completions", completion(), version="1.0", headers=keep))
        second = client.read_response()
        check("HTTP/1.0 keep-alive: answered with Connection: keep-alive and a length",
              first.status == 200 and first.header("connection").lower() == "keep-alive" and
              first.framing == "length", f"{first}")
        check("HTTP/1.0 keep-alive: a second request on the same connection",
              second.status == 200 and second.version == "HTTP/1.0" and
              second.json()["choices"][0]["text"] != "", f"{second}")
        client.send(request("POST", "/v1/completions", completion(stream=True, max_tokens=3),
                            version="1.0", headers=keep))
        third = client.read_response()
        gap = client.wait_closed(timeout=5.0)
        check("HTTP/1.0 keep-alive stream: Connection: close, body delimited by the close",
              third.status == 200 and third.header("connection").lower() == "close" and
              third.framing == "close" and sse_payloads(third.body)[-1:] == ["[DONE]"] and
              gap is not None and gap <= CLOSE_WITHIN, f"{third.headers} gap {gap}")


def test_pipelining(port: int) -> None:
    with RawHttp(port) as client:
        client.send(request("GET", "/health") +
                    request("POST", "/v1/completions", completion(max_tokens=2)) +
                    request("POST", "/v1/chat/completions", chat(stream=True, max_tokens=3)) +
                    request("GET", "/v1/models", headers={"Connection": "close"}))
        responses = [client.read_response() for _ in range(4)]
        gap = client.wait_closed(timeout=5.0)
    kinds = []
    for response in responses:
        if response.status != 200:
            kinds.append(f"status {response.status}")
        elif response.framing == "chunked":
            kinds.append("stream" if sse_payloads(response.body)[-1:] == ["[DONE]"] else "bad")
        else:
            body = response.json()
            kinds.append(body.get("object") or body.get("status") or "?")
    check("four pipelined requests answered in order",
          kinds == ["ok", "text_completion", "stream", "list"], kinds)
    check("the last pipelined request's Connection: close ends the connection",
          gap is not None and gap <= CLOSE_WITHIN, f"gap {gap}")


def test_expect_continue(port: int) -> None:
    body = request("POST", "/v1/completions", completion(max_tokens=2),
                   headers={"Expect": "100-continue"})
    head, payload = body.split(b"\r\n\r\n", 1)
    with RawHttp(port, timeout=5) as client:
        client.send(head + b"\r\n\r\n")
        interim = client.read_response()
        check("Expect: 100-continue: 100 Continue before the body is sent", interim.status == 100,
              f"{interim.status}")
        client.send(payload)
        final = client.read_response()
        check("Expect: 100-continue: then the answer", final.status == 200 and
              final.json()["object"] == "text_completion", f"{final.status} {final.body[:200]!r}")

    huge = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {1 << 30}\r\nExpect: 100-continue\r\n\r\n").encode()
    with RawHttp(port, timeout=5) as client:
        client.send(huge)
        response = client.read_response()
        check("Expect: 100-continue with a body over the limit: 413 at once, no 100",
              response.status == 413 and response.json()["error"]["code"] == "request_too_large",
              f"{response.status} {response.body[:200]!r}")

    with RawHttp(port, timeout=5) as client:
        client.send(request("POST", "/v1/completions", completion(),
                            headers={"Expect": "something-else"}))
        response = client.read_response()
        check("an unknown expectation: 417", response.status == 417 and
              response.json()["error"]["code"] == "expectation_failed",
              f"{response.status} {response.body[:200]!r}")

    with RawHttp(port, timeout=5) as client:
        client.send(b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 200\r\nExpect: 100-continue\r\n\r\n")
        client.sock.settimeout(0.5)
        try:
            client._fill()
            early = client.buffer
        except (socket.timeout, TimeoutError):
            early = b""
        check("HTTP/1.0 with Expect: 100-continue gets no 100 (RFC 9110: 1.0 clients send anyway)",
              not early.startswith(b"HTTP/1.1 100"), early[:60])


def refused(client: RawHttp, status: int, code: str) -> tuple[bool, str]:
    try:
        response = client.read_response()
    except ConnectionClosed:
        return False, "closed without an answer"
    try:
        error_code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        error_code = None
    gap = client.wait_closed(timeout=5.0)
    return (response.status == status and error_code == code and gap is not None,
            f"{response.status} {error_code} closed={gap is not None} {response.body[:160]!r}")


def test_limits(port: int) -> None:
    with RawHttp(port) as client:
        client.send(request("GET", "/health", headers={"X-Big": "a" * (70 << 10)}))
        ok, detail = refused(client, 431, "headers_too_large")
        check("a 70 KiB header: 431 headers_too_large, then closed", ok, detail)
    with RawHttp(port) as client:
        many = {f"X-Field-{i}": "1" for i in range(150)}
        client.send(request("GET", "/health", headers=many))
        ok, detail = refused(client, 431, "headers_too_large")
        check("150 header fields (limit 100): 431, then closed", ok, detail)
    with RawHttp(port) as client:
        client.send(request("GET", "/health?" + "q" * 10000))
        ok, detail = refused(client, 414, "uri_too_long")
        check("a 10 KB request target (limit 8 KiB): 414 uri_too_long, then closed", ok, detail)
    with RawHttp(port) as client:
        client.send(b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n")
        ok, detail = refused(client, 505, "http_version_not_supported")
        check("HTTP/2.0 on the wire: 505, then closed", ok, detail)
    with RawHttp(port) as client:
        client.send(b"GARBAGE\r\n\r\n")
        ok, detail = refused(client, 400, "bad_http_request")
        check("a malformed request line: 400 bad_http_request, then closed", ok, detail)
    with RawHttp(port) as client:
        client.send(request("GET", "/health"))
        check("the server still answers after all that", client.read_response().status == 200)


def slow_sender(client: RawHttp, data: bytes, stop: threading.Event) -> None:
    for i in range(len(data)):
        if stop.is_set():
            return
        try:
            client.sock.send(data[i:i + 1])
        except OSError:
            return
        stop.wait(1.0)


def test_slow_clients(port: int) -> None:
    # Slowloris: the header one byte a second.
    started = time.monotonic()
    with RawHttp(port, timeout=15) as client:
        stop = threading.Event()
        thread = threading.Thread(target=slow_sender, daemon=True,
                                  args=(client, request("GET", "/health") + b"X" * 60, stop))
        thread.start()
        ok, detail = refused(client, 408, "request_timeout")
        elapsed = time.monotonic() - started
        stop.set()
        thread.join()
    check(f"headers at one byte a second: 408 request_timeout and cut off (header timeout "
          f"{HEADER_TIMEOUT:.0f} s; took {elapsed:.1f} s)", ok and elapsed < HEADER_TIMEOUT + 5,
          detail)

    # A body that stops halfway.
    started = time.monotonic()
    with RawHttp(port, timeout=15) as client:
        data = request("POST", "/v1/completions", completion())
        client.send(data[:-10])
        ok, detail = refused(client, 408, "request_timeout")
        elapsed = time.monotonic() - started
    check(f"a body that stops arriving: 408 after the body timeout ({elapsed:.1f} s)",
          ok and BODY_TIMEOUT - 0.2 <= elapsed < BODY_TIMEOUT + 5, detail)

    # A connection that sends nothing, and one idle after a request.
    with RawHttp(port, timeout=15) as client:
        gap = client.wait_closed(timeout=IDLE_TIMEOUT + 3)
        check(f"a connection that sends nothing is closed after the idle timeout "
              f"({IDLE_TIMEOUT:.0f} s)", gap is not None, "still open")
    with RawHttp(port, timeout=15) as client:
        client.send(request("GET", "/health"))
        response = client.read_response()
        started = time.monotonic()
        gap = client.wait_closed(timeout=IDLE_TIMEOUT + 3)
        waited = time.monotonic() - started
        check(f"a keep-alive connection idle after its answer closes after ~{IDLE_TIMEOUT:.0f} s "
              f"(took {waited:.1f} s)", response.status == 200 and gap is not None and
              IDLE_TIMEOUT - 0.5 <= waited <= IDLE_TIMEOUT + 2, f"gap {gap}")


def test_max_connections(tachyon: str, model: str | None) -> None:
    limit = 4
    server = TachyonServer(tachyon, model, args=["-c", str(CTX), "--max-connections", str(limit),
                                                 "--idle-timeout", "30"])
    with server:
        # First a connection that waits (asking /metrics on itself) until it is the only one
        # open: the fixture's last health check may still be closing.
        first = RawHttp(server.port)
        deadline = time.monotonic() + 10
        while True:
            first.send(request("GET", "/metrics"))
            values = parse_prometheus(first.read_response().body.decode())
            if values.get("tachyon:http_connections_open") == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        streamer = RawHttp(server.port)
        streamer.send(request("POST", "/v1/completions",
                              completion(stream=True, max_tokens=300, ignore_eos=True)))
        idle = [first] + [RawHttp(server.port) for _ in range(limit - 2)]
        for client in idle[1:]:  # answered: accepted (after the streamer) and counted
            client.send(request("GET", "/health"))
            client.read_response()
        extra = RawHttp(server.port, timeout=10)
        ok, detail = refused(extra, 503, "server_overloaded")
        extra.close()
        check(f"connection {limit + 1} over --max-connections {limit}: 503 server_overloaded, "
              f"closed", ok, detail)
        stream = streamer.read_response()
        check("the stream that was running meanwhile finishes whole",
              stream.status == 200 and sse_payloads(stream.body)[-1:] == ["[DONE]"],
              f"{stream.status} {stream.body[-120:]!r}")
        idle[0].send(request("GET", "/health"))
        check("an open idle connection still answers", idle[0].read_response().status == 200)
        streamer.close()
        for client in idle:
            client.close()
        deadline = time.monotonic() + 5
        status = 0
        while time.monotonic() < deadline:
            with RawHttp(server.port) as client:
                client.send(request("GET", "/health", headers={"Connection": "close"}))
                status = client.read_response().status
            if status == 200:
                break
            time.sleep(0.1)
        check("once they close, new connections are served again", status == 200, status)
        values = metrics(server.url)
        check("/metrics counts the refused connection",
              values.get("tachyon:http_connections_refused_total", 0) >= 1, values.get(
                  "tachyon:http_connections_refused_total"))
    info(f"max-connections server exit {server.returncode}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--model")
    args = parser.parse_args()
    server = TachyonServer(args.tachyon, args.model, args=[
        "-c", str(CTX), "--idle-timeout", str(IDLE_TIMEOUT), "--header-timeout",
        str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT), "--max-body-bytes", "65536"])
    with server:
        MODEL["id"] = server.get_json("/v1/models")[1]["data"][0]["id"]
        section("Connection: close", test_connection_close, server.port)
        section("HTTP/1.0", test_http10, server.port)
        section("pipelining", test_pipelining, server.port)
        section("Expect: 100-continue", test_expect_continue, server.port)
        section("limits", test_limits, server.port)
        section("slow clients", test_slow_clients, server.port)
        values = metrics(server.url)
        check("/metrics counts refused requests",
              values.get("tachyon:http_requests_refused_total", 0) >= 6,
              values.get("tachyon:http_requests_refused_total"))
    section("max connections", test_max_connections, args.tachyon, args.model)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
