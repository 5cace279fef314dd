"""HTTP/1.x on a raw socket, for tests that must see the wire: which version and headers come
back, how a body is framed (Content-Length, chunked, or ended by the close), and when the
server closes the connection.

    client = RawHttp(port)                     # connects to 127.0.0.1:port
    client.send(request("GET", "/health", version="1.0"))
    response = client.read_response()          # status, headers, body, framing
    client.wait_closed(timeout=1.0)            # seconds from the last byte to the close, or None

Only the standard library is used here.
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field


def request(method: str, path: str, body: bytes | dict | None = None, version: str = "1.1",
            headers: dict[str, str] | None = None) -> bytes:
    """One request's bytes. A dict body is sent as JSON with its Content-Length."""
    data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    lines = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1"]
    all_headers = dict(headers or {})
    if data or method == "POST":
        all_headers.setdefault("Content-Type", "application/json")
        all_headers.setdefault("Content-Length", str(len(data)))
    lines += [f"{name}: {value}" for name, value in all_headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


@dataclass
class Response:
    version: str = ""         # "HTTP/1.1"
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    framing: str = ""         # "length", "chunked" or "close"
    complete: bool = False    # the body arrived whole (its framing said where it ends)

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    def json(self):
        return json.loads(self.body)


class ConnectionClosed(Exception):
    pass


class RawHttp:
    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.closed = False                   # the server's FIN (or a reset) was seen
        self.last_data_time = time.monotonic()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawHttp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        """Reads more bytes into the buffer; ConnectionClosed at EOF or reset."""
        if self.closed:
            raise ConnectionClosed()
        try:
            piece = self.sock.recv(65536)
        except ConnectionResetError:
            piece = b""
        if not piece:
            self.closed = True
            raise ConnectionClosed()
        self.buffer += piece
        self.last_data_time = time.monotonic()

    def _take_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_response(self, head_only_for: str | None = None) -> Response:
        """The next response. Interim 1xx responses are returned too (their own call each).
        `head_only_for` set: a response to HEAD (no body)."""
        response = Response()
        status_line = self._take_line().decode("latin-1")
        response.version, status, *_ = status_line.split(" ", 2) + [""]
        response.status = int(status)
        while True:
            line = self._take_line().decode("latin-1")
            if not line:
                break
            name, _, value = line.partition(":")
            response.headers[name.strip().lower()] = value.strip()
        if 100 <= response.status < 200 or response.status in (204, 304) or head_only_for:
            response.complete = True
            return response
        if "chunked" in response.header("transfer-encoding").lower():
            response.framing = "chunked"
            body = b""
            try:
                while True:
                    size = int(self._take_line().split(b";")[0], 16)
                    if size == 0:
                        self._take_line()  # the empty trailer
                        break
                    body += self._take(size)
                    self._take(2)
                response.complete = True
            except ConnectionClosed:
                pass
            response.body = body
        elif response.header("content-length"):
            response.framing = "length"
            try:
                response.body = self._take(int(response.header("content-length")))
                response.complete = True
            except ConnectionClosed:
                response.body, self.buffer = self.buffer, b""
        else:
            response.framing = "close"
            try:
                while True:
                    self._fill()
            except ConnectionClosed:
                response.body, self.buffer = self.buffer, b""
                response.complete = True
        return response

    def wait_closed(self, timeout: float) -> float | None:
        """Waits for the server to close; the seconds from the last byte received to the close,
        or None when it stayed open for `timeout`. Bytes that arrive meanwhile are kept."""
        if self.closed:
            return 0.0
        deadline = time.monotonic() + timeout
        previous = self.sock.gettimeout()
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
                try:
                    self._fill()
                except ConnectionClosed:
                    return time.monotonic() - self.last_data_time
                except (socket.timeout, TimeoutError):
                    return None
        finally:
            self.sock.settimeout(previous)


def sse_payloads(body: bytes) -> list[str]:
    """The data: payloads of an SSE body."""
    return [line[len("data: "):] for line in body.decode(errors="replace").split("\n")
            if line.startswith("data: ")]
