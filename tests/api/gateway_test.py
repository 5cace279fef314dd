#!/usr/bin/env python3
"""The multi-tenant API end to end: keys made with `tachyon keys` on a temporary --db, a server
started with `--auth db`, and real clients (raw HTTP and the official openai client).

- Auth: every route without a key, with a wrong key and with a revoked key (revoked with the
  CLI while the server runs; it must take effect within ~2 s) answers 401 invalid_api_key in
  OpenAI's error shape; /health stays open. Static `--api-key` keys on a second server; `serve
  --host 0.0.0.0` refuses to run without auth unless --insecure-no-auth.
- Rate limits, exactly: 40 parallel requests against rpm=30 → 30 pass and 10 get 429 "requests"
  with Retry-After / retry-after-ms; honouring Retry-After works; after a partial refill exactly
  as many pass as refilled. tpm: a request the bucket can never hold → 429 x-should-retry: false;
  smaller ones drain it → 429 "tokens" with Retry-After.
- The openai SDK (default max_retries=2): waits out Retry-After on its own and succeeds (in
  about Retry-After); a spent daily quota → RateLimitError at once, one HTTP request in all.
- max_tokens cap (400), --models (403), x-ratelimit-* on a 200, x-request-id everywhere,
  per-key /metrics without secrets, and `tachyon usage --json` (per key, per day, --key).

    .venv/bin/python tests/api/gateway_test.py --tachyon build/tachyon [--model M.gguf]
        [--sections auth,rpm,tpm,headers,caps,sdk-retry,sdk-quota,metrics,usage,static,bind]

Run near 00:00 UTC, the per-day usage and quota checks can straddle two days.
"""
from __future__ import annotations

import argparse
import datetime
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_fixture import TachyonServer, free_port, http_get  # noqa: E402
from gateway_util import (KeysCli, bearer, error_of, error_shape_problem,  # noqa: E402
                          fetch_metrics_text, httpx, key_counter, key_samples, parse_go_duration)

ROOT = Path(__file__).resolve().parents[2]
CTX = 4096
REVOKE_DEADLINE = 2.5  # seconds; the key cache lives 1 s

from checks import results, check, info, section, exit_status  # noqa: E402


def short(response) -> str:
    return f"{response.status_code} {response.text[:300]}"


class Context:
    """The db server, its keys (name → secret) and what the clients saw succeed per key."""

    def __init__(self, tachyon: str, keys_cli: KeysCli, server: TachyonServer):
        self.tachyon = tachyon
        self.cli = keys_cli
        self.server = server
        self.url = server.url
        self.secrets: dict[str, str] = {}
        self.http = httpx.Client(base_url=self.url, timeout=300)
        self.model = ""
        self.lock = threading.Lock()
        # key name → [successful requests, prompt tokens, completion tokens]
        self.observed: dict[str, list[int]] = {}
        self.rejected: dict[str, int] = {}  # key name → 4xx answers from the gateway's checks
        self.received: dict[int, float] = {}
        self.unauthorized = 0  # 401s the auth section saw

    def create(self, name: str, **limits) -> str:
        created = self.cli.create(name, **limits)
        self.secrets[name] = created["key"]
        return created["key"]

    def note(self, key_name: str, response) -> None:
        """Counts a chat/completions answer for the usage checks."""
        with self.lock:
            if response.status_code == 200:
                usage = response.json().get("usage") or {}
                entry = self.observed.setdefault(key_name, [0, 0, 0])
                entry[0] += 1
                entry[1] += usage.get("prompt_tokens", 0)
                entry[2] += usage.get("completion_tokens", 0)
            elif response.status_code in (400, 403, 429):
                self.rejected[key_name] = self.rejected.get(key_name, 0) + 1

    def chat_body(self, max_tokens: int | None = 1, content: str = "Say hi.", **extra) -> dict:
        body = {"model": self.model, "messages": [{"role": "user", "content": content}],
                "temperature": 0, **extra}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return body

    def chat(self, key_name: str, client=None, **kwargs):
        client = client or self.http
        response = client.post("/v1/chat/completions", json=self.chat_body(**kwargs),
                               headers=bearer(self.secrets[key_name]))
        self.note(key_name, response)
        return response

    def completion(self, key_name: str, prompt: str, max_tokens: int, client=None, **extra):
        client = client or self.http
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0, **extra}
        response = client.post("/v1/completions", json=body,
                               headers=bearer(self.secrets[key_name]))
        self.note(key_name, response)
        return response

    def burst(self, n: int, request) -> list:
        """n requests at once (each thread its own connection, released by one barrier);
        request(client, i) → response. Exceptions come back in place of responses.
        self.received[id(response)] is when each response arrived (time.monotonic())."""
        barrier = threading.Barrier(n)
        out: list = [None] * n

        def worker(i: int) -> None:
            with httpx.Client(base_url=self.url, timeout=300) as client:
                try:
                    barrier.wait(timeout=60)
                    out[i] = request(client, i)
                    self.received[id(out[i])] = time.monotonic()
                except Exception as error:  # noqa: BLE001
                    out[i] = error

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return out


def statuses(responses) -> list:
    return [r.status_code if hasattr(r, "status_code") else repr(r) for r in responses]


def check_rate_limit_429(what: str, response, kind: str) -> None:
    """429 rate_limit_exceeded of `kind` ("requests"/"tokens") that asks for a retry."""
    error = error_of(response)
    check(f"{what}: 429 type {kind}, code rate_limit_exceeded, OpenAI shape",
          response.status_code == 429 and error.get("type") == kind and
          error.get("code") == "rate_limit_exceeded" and error_shape_problem(response) is None,
          f"{short(response)} ({error_shape_problem(response)})")
    retry_after = response.headers.get("retry-after", "")
    retry_ms = response.headers.get("retry-after-ms", "")
    try:
        seconds, millis = int(retry_after), float(retry_ms)
        sane = seconds >= 1 and 0 < millis <= seconds * 1000 and millis > (seconds - 1) * 1000
    except ValueError:
        sane = False
    check(f"{what}: Retry-After integer ≥ 1 s, retry-after-ms within the same second",
          sane, f"Retry-After {retry_after!r}, retry-after-ms {retry_ms!r}")
    check(f"{what}: no x-should-retry: false", response.headers.get("x-should-retry") != "false",
          dict(response.headers))


# ---- auth -------------------------------------------------------------------------------------

def routes(ctx: Context) -> list[tuple[str, str, dict | None]]:
    return [("POST", "/v1/chat/completions", ctx.chat_body(max_tokens=1)),
            ("POST", "/v1/completions", {"model": ctx.model, "prompt": "Hi", "max_tokens": 1}),
            ("GET", "/v1/models", None),
            ("GET", f"/v1/models/{ctx.model}", None),
            ("POST", "/tokenize", {"content": "hello"}),
            ("POST", "/detokenize", {"tokens": [1, 2]}),
            ("GET", "/metrics", None)]


def call(ctx: Context, method: str, path: str, body, headers: dict):
    if method == "GET":
        response = ctx.http.get(path, headers=headers)
    else:
        response = ctx.http.post(path, json=body, headers=headers)
    ctx.unauthorized += response.status_code == 401
    return response


def check_all_routes_401(ctx: Context, what: str, headers: dict, secret: str | None) -> None:
    bad = []
    for method, path, body in routes(ctx):
        response = call(ctx, method, path, body, headers)
        error = error_of(response)
        problem = error_shape_problem(response)
        if response.status_code != 401 or error.get("code") != "invalid_api_key" or problem:
            bad.append(f"{method} {path}: {short(response)} ({problem})")
        elif not response.headers.get("x-request-id"):
            bad.append(f"{method} {path}: no x-request-id on the 401")
        elif secret and secret in response.text:
            bad.append(f"{method} {path}: the 401 repeats the whole secret")
    check(f"{what}: every route answers 401 invalid_api_key (OpenAI shape, x-request-id)",
          not bad, "\n      ".join(bad))


def test_auth(ctx: Context) -> None:
    good = {"Authorization": f"Bearer {ctx.secrets['auth']}"}
    bad = []
    for method, path, body in routes(ctx):
        response = call(ctx, method, path, body, good)
        if path in ("/v1/chat/completions", "/v1/completions"):
            ctx.note("auth", response)
        if response.status_code != 200:
            bad.append(f"{method} {path}: {short(response)}")
    check("a valid key gets 200 on every route", not bad, "\n      ".join(bad))
    response = ctx.http.get("/v1/models", headers={"Authorization":
                                                   f"bearer {ctx.secrets['auth']}"})
    check("the Bearer scheme is case-insensitive", response.status_code == 200, short(response))

    for path in ("/health",):
        response = ctx.http.get(path)
        check(f"GET {path} without a key is 200", response.status_code == 200, short(response))
    failures_before = key_counter(fetch_metrics_text(ctx.url, ctx.secrets["auth"]), None,
                                  "tachyon:authentication_failures_total")
    ctx.unauthorized = 0

    check_all_routes_401(ctx, "no Authorization header", {}, None)
    wrong = "sk-tachyon-" + "x" * 43
    check_all_routes_401(ctx, "an unknown key", bearer(wrong), wrong)
    check_all_routes_401(ctx, "Bearer without a key", {"Authorization": "Bearer"}, None)
    check_all_routes_401(ctx, "a key without the Bearer scheme",
                         {"Authorization": ctx.secrets["auth"]}, ctx.secrets["auth"])
    response = call(ctx, "GET", "/v1/models", None, {})
    check("the 401 without a key is AuthenticationError-shaped (type set, message says so)",
          response.status_code == 401 and error_of(response).get("message"), short(response))

    # Revocation while the server runs.
    doomed = ctx.secrets["doomed"]
    response = ctx.http.get("/v1/models", headers=bearer(doomed))
    check("the key to revoke works before", response.status_code == 200, short(response))
    ctx.cli.revoke("doomed")
    revoked_at = time.monotonic()
    status = 200
    while time.monotonic() - revoked_at < 10:
        status = call(ctx, "GET", "/v1/models", None, bearer(doomed)).status_code
        if status == 401:
            break
        time.sleep(0.05)
    took = time.monotonic() - revoked_at
    info(f"revocation took effect after {took:.2f} s")
    check(f"`keys revoke` takes effect within {REVOKE_DEADLINE} s",
          status == 401 and took <= REVOKE_DEADLINE, f"status {status} after {took:.2f} s")
    check_all_routes_401(ctx, "a revoked key", bearer(doomed), doomed)
    response = ctx.http.get("/v1/models", headers=good)
    check("other keys still work after a revocation", response.status_code == 200,
          short(response))
    failures_after = key_counter(fetch_metrics_text(ctx.url, ctx.secrets["auth"]), None,
                                 "tachyon:authentication_failures_total")
    check(f"/metrics: authentication_failures_total grew by the {ctx.unauthorized} 401s",
          failures_before is not None and failures_after is not None and
          failures_after - failures_before == ctx.unauthorized,
          f"{failures_before} → {failures_after}")


# ---- rate limits -----------------------------------------------------------------------------

def test_rpm_exact(ctx: Context) -> None:
    responses = ctx.burst(40, lambda client, i: ctx.chat("rpm30", client=client, max_tokens=1))
    codes = statuses(responses)
    ok = [r for r in responses if getattr(r, "status_code", 0) == 200]
    limited = [r for r in responses if getattr(r, "status_code", 0) == 429]
    check("rpm=30, 40 parallel requests: exactly 30 pass and 10 get 429",
          len(ok) == 30 and len(limited) == 10, f"statuses {sorted(map(str, codes))}")
    for response in limited[:1]:
        check_rate_limit_429("rpm=30 burst", response, "requests")
    others = [short(r) for r in limited[1:]
              if error_of(r).get("type") != "requests" or not r.headers.get("retry-after")]
    check("every 429 of the burst is type requests with Retry-After", not others, others[:3])
    check("every response of the burst has x-request-id",
          all(getattr(r, "headers", {}).get("x-request-id") for r in responses),
          [dict(r.headers) for r in responses if hasattr(r, "headers")
           and not r.headers.get("x-request-id")][:2])
    if not limited:
        return
    # Honour the Retry-After of one 429, counted from when it arrived.
    first = limited[0]
    wait = float(first.headers.get("retry-after-ms", "0") or 0) / 1000.0 or \
        float(first.headers.get("retry-after", "1"))
    due = ctx.received.get(id(first), time.monotonic()) + wait
    late = time.monotonic() - due
    if late < 0:
        time.sleep(-late)
    info(f"retrying after retry-after-ms {wait * 1000:.0f}"
         + (f" ({late:.2f} s late: the admitted requests were still running)" if late > 0 else ""))
    response = ctx.chat("rpm30", max_tokens=1)
    check("a retry after Retry-After succeeds", response.status_code == 200, short(response))
    if response.status_code != 200:
        return
    # Where the bucket stands now, from x-ratelimit-reset-requests (time until full, in ms):
    # level = 30 - 0.5/s × reset. Wait until it holds `whole` + 2.5 requests, then send
    # `whole` + 5 at once: exactly `whole` + 2 pass, with ±0.5 request (±1 s) of slack for
    # scheduling jitter on either side.
    reset = parse_go_duration(response.headers.get("x-ratelimit-reset-requests"))
    if not check("the retry's x-ratelimit-reset-requests is a Go duration", reset is not None,
                 dict(response.headers)):
        return
    read_at = time.monotonic()
    level = 30 - 0.5 * reset
    whole = max(0, int(level))
    sleep = (whole + 2.5 - level) / 0.5 - (time.monotonic() - read_at)
    info(f"bucket after the retry: {level:.3f} requests; waiting {sleep:.2f} s for "
         f"{whole + 2.5:.1f}")
    time.sleep(max(0.0, sleep))
    count = whole + 5
    responses = ctx.burst(count, lambda client, i: ctx.chat("rpm30", client=client, max_tokens=1))
    ok = sum(1 for r in responses if getattr(r, "status_code", 0) == 200)
    limited = [r for r in responses if getattr(r, "status_code", 0) == 429]
    check(f"after a partial refill to {whole + 2.5:.1f}, exactly {whole + 2} of {count} parallel "
          f"requests pass", ok == whole + 2 and len(limited) == 3, statuses(responses))
    if limited:
        check_rate_limit_429("rpm=30 second window", limited[0], "requests")


def test_tpm(ctx: Context) -> None:
    response = ctx.completion("tpm1k", "Hello", 2000)
    error = error_of(response)
    check("tpm=1000: max_tokens 2000 → 429 type tokens, rate_limit_exceeded",
          response.status_code == 429 and error.get("type") == "tokens" and
          error.get("code") == "rate_limit_exceeded" and error_shape_problem(response) is None,
          short(response))
    check("… with x-should-retry: false (no wait can make it fit)",
          response.headers.get("x-should-retry") == "false", dict(response.headers))
    check("… message says the request is too large",
          "too large" in error.get("message", "").lower(), error.get("message"))
    # Four requests of ~5 + 300 tokens at once: three fit into 1000, the fourth does not (and
    # none finishes before all four were admitted: 300 tokens take well over a second).
    responses = ctx.burst(4, lambda client, i: ctx.completion(
        "tpm1k", f"Count to a hundred, attempt {i}:", 300, client=client, ignore_eos=True))
    ok = [r for r in responses if getattr(r, "status_code", 0) == 200]
    limited = [r for r in responses if getattr(r, "status_code", 0) == 429]
    check("tpm=1000: 4 parallel requests of ~310 tokens → 3 pass, 1 gets 429",
          len(ok) == 3 and len(limited) == 1, statuses(responses))
    if limited:
        check_rate_limit_429("tpm bucket drained", limited[0], "tokens")
        wait = float(limited[0].headers.get("retry-after-ms", "0"))
        info(f"tpm 429 asks to wait {wait:.0f} ms")
    if ok:
        headers = ok[-1].headers
        check("tpm-only key: x-ratelimit-*-tokens present, no *-requests headers",
              headers.get("x-ratelimit-limit-tokens") == "1000" and
              "x-ratelimit-limit-requests" not in headers, dict(headers))


def test_ratelimit_headers(ctx: Context) -> None:
    response = ctx.chat("headers", max_tokens=4)
    check("limited key: 200", response.status_code == 200, short(response))
    h = response.headers
    names = [f"x-ratelimit-{kind}-{what}" for kind in ("limit", "remaining", "reset")
             for what in ("requests", "tokens")]
    check("x-ratelimit-{limit,remaining,reset}-{requests,tokens} all present",
          all(name in h for name in names), {n: h.get(n) for n in names})
    check("x-ratelimit-limit-requests 10, -tokens 50000",
          h.get("x-ratelimit-limit-requests") == "10" and
          h.get("x-ratelimit-limit-tokens") == "50000", dict(h))
    check("x-ratelimit-remaining-requests 9 after one request (refill: 1 per 6 s)",
          h.get("x-ratelimit-remaining-requests") == "9", h.get("x-ratelimit-remaining-requests"))
    try:
        remaining_tokens = int(h.get("x-ratelimit-remaining-tokens", ""))
    except ValueError:
        remaining_tokens = -1
    check("x-ratelimit-remaining-tokens an integer in [0, 50000)",
          0 <= remaining_tokens < 50000, h.get("x-ratelimit-remaining-tokens"))
    reset_requests = parse_go_duration(h.get("x-ratelimit-reset-requests"))
    reset_tokens = parse_go_duration(h.get("x-ratelimit-reset-tokens"))
    check("x-ratelimit-reset-requests is a Go duration of about 6 s (one request to refill)",
          reset_requests is not None and 4.0 <= reset_requests <= 6.0,
          h.get("x-ratelimit-reset-requests"))
    check("x-ratelimit-reset-tokens is a Go duration within a minute",
          reset_tokens is not None and 0 <= reset_tokens <= 60.0,
          h.get("x-ratelimit-reset-tokens"))
    check("x-request-id on a 200", h.get("x-request-id"), dict(h))
    unlimited = ctx.chat("auth", max_tokens=1)
    check("an unlimited key gets no x-ratelimit-* placeholders",
          not any(k.lower().startswith("x-ratelimit") for k in unlimited.headers.keys()),
          dict(unlimited.headers))


# ---- caps ------------------------------------------------------------------------------------

def test_caps(ctx: Context) -> None:
    for field in ("max_tokens", "max_completion_tokens"):
        body = ctx.chat_body(max_tokens=None)
        body[field] = 17
        response = ctx.http.post("/v1/chat/completions", json=body,
                                 headers=bearer(ctx.secrets["capped"]))
        ctx.note("capped", response)
        error = error_of(response)
        check(f"--max-tokens 16: {field} 17 → 400 invalid_request_error, param max_tokens",
              response.status_code == 400 and error.get("type") == "invalid_request_error" and
              error.get("param") == "max_tokens" and error_shape_problem(response) is None,
              short(response))
    response = ctx.chat("capped", max_tokens=16, ignore_eos=True)
    check("--max-tokens 16: max_tokens 16 passes", response.status_code == 200, short(response))
    response = ctx.chat("capped", max_tokens=None, ignore_eos=True)
    usage = response.json().get("usage", {}) if response.status_code == 200 else {}
    check("--max-tokens 16: no max_tokens → the cap applies (16 tokens, finish length)",
          response.status_code == 200 and usage.get("completion_tokens") == 16 and
          response.json()["choices"][0]["finish_reason"] == "length", short(response))

    response = ctx.chat("restricted", max_tokens=1)
    error = error_of(response)
    check("--models other-model: the served model → 403 permission_error",
          response.status_code == 403 and error.get("type") == "permission_error" and
          error_shape_problem(response) is None, short(response))
    check("… code model_not_allowed, param model",
          error.get("code") == "model_not_allowed" and error.get("param") == "model", error)
    try:
        openai.OpenAI(base_url=ctx.url + "/v1", api_key=ctx.secrets["restricted"],
                      max_retries=0).chat.completions.create(
            model=ctx.model, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
        check("… the SDK raises PermissionDeniedError", False, "no error")
    except openai.PermissionDeniedError as exc:
        check("… the SDK raises PermissionDeniedError", exc.status_code == 403, exc)
    response = ctx.chat("allowed", max_tokens=1)
    check("--models <the served model> → 200", response.status_code == 200, short(response))


# ---- the openai SDK --------------------------------------------------------------------------

class WireLog:
    """An httpx client for the SDK that records every request and response on the wire."""

    def __init__(self):
        self.requests = 0
        self.responses: list[tuple[int, dict, float]] = []
        self.client = httpx.Client(timeout=120, event_hooks={"request": [self._request],
                                                             "response": [self._response]})

    def _request(self, request) -> None:
        self.requests += 1

    def _response(self, response) -> None:
        self.responses.append((response.status_code, dict(response.headers), time.monotonic()))


def test_sdk_retry(ctx: Context) -> None:
    responses = ctx.burst(20, lambda client, i: ctx.chat("sdk", client=client, max_tokens=1))
    check("rpm=20: 20 parallel requests drain the bucket (all 20 pass)",
          statuses(responses).count(200) == 20, statuses(responses))
    wire = WireLog()
    client = openai.OpenAI(base_url=ctx.url + "/v1", api_key=ctx.secrets["sdk"],
                           http_client=wire.client)
    check("the SDK's default max_retries is 2", client.max_retries == 2, client.max_retries)
    start = time.monotonic()
    try:
        completion = client.chat.completions.create(
            model=ctx.model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=1)
        error = None
    except openai.APIError as exc:
        completion, error = None, exc
    took = time.monotonic() - start
    codes = [status for status, _, _ in wire.responses]
    check("SDK against a drained rpm bucket: succeeds after one automatic retry (429, 200)",
          completion is not None and codes == [429, 200], f"{codes} error {error!r}")
    if codes[:1] == [429]:
        headers = wire.responses[0][1]
        wait = float(headers.get("retry-after-ms", "nan")) / 1000.0
        waited = wire.responses[-1][2] - wire.responses[0][2] if len(codes) > 1 else 0.0
        info(f"retry-after-ms {wait * 1000:.0f}; the SDK's call took {took:.2f} s, "
             f"{waited:.2f} s from the 429 to the 200")
        check("… the SDK waited about Retry-After (retry-after-ms ≤ wait ≤ it + 1.5 s)",
              wait - 0.02 <= waited <= wait + 1.5, f"waited {waited:.3f} s, asked {wait:.3f} s")
    with ctx.lock:
        if completion is not None:
            entry = ctx.observed.setdefault("sdk", [0, 0, 0])
            entry[0] += 1
            entry[1] += completion.usage.prompt_tokens
            entry[2] += completion.usage.completion_tokens
        ctx.rejected["sdk"] = ctx.rejected.get("sdk", 0) + codes.count(429)


def test_sdk_quota(ctx: Context) -> None:
    response = ctx.chat("quota", max_tokens=4)
    check("--daily-tokens 1: the first request passes (nothing spent yet)",
          response.status_code == 200, short(response))
    time.sleep(0.1)
    metrics_before = fetch_metrics_text(ctx.url, ctx.secrets["auth"])
    rejected_before = key_counter(metrics_before, "quota", "tachyon:key_rejections_total",
                                  reason="daily_quota") or 0.0
    wire = WireLog()
    client = openai.OpenAI(base_url=ctx.url + "/v1", api_key=ctx.secrets["quota"],
                           http_client=wire.client)
    start = time.monotonic()
    caught = None
    try:
        client.chat.completions.create(
            model=ctx.model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
    except openai.APIError as exc:
        caught = exc
    took = time.monotonic() - start
    check("SDK against a spent daily quota: openai.RateLimitError",
          isinstance(caught, openai.RateLimitError), repr(caught))
    if isinstance(caught, openai.APIStatusError):
        body = caught.body if isinstance(caught.body, dict) else {}
        check("… type and code insufficient_quota",
              body.get("type") == "insufficient_quota" and body.get("code") == "insufficient_quota",
              caught.body)
        check("… x-should-retry: false", caught.response.headers.get("x-should-retry") == "false",
              dict(caught.response.headers))
        ctx.rejected["quota"] = ctx.rejected.get("quota", 0) + 1
    check("… failed fast (no retry sleep)", took < 1.0, f"{took:.2f} s")
    check("… exactly one HTTP request left the client", wire.requests == 1, wire.requests)
    time.sleep(0.1)
    metrics_after = fetch_metrics_text(ctx.url, ctx.secrets["auth"])
    rejected_after = key_counter(metrics_after, "quota", "tachyon:key_rejections_total",
                                 reason="daily_quota")
    check("… and the server counted exactly one rejection for the key (per-key /metrics)",
          rejected_after is not None and rejected_after - rejected_before == 1,
          f"before {rejected_before}, after {rejected_after}; the key's samples: "
          f"{key_samples(metrics_after, 'quota')}")


# ---- observability ---------------------------------------------------------------------------

def test_metrics(ctx: Context) -> None:
    text = fetch_metrics_text(ctx.url, ctx.secrets["auth"])
    leaked = [name for name, secret in ctx.secrets.items() if secret in text]
    check("/metrics never contains a secret", not leaked, leaked)
    samples = key_samples(text, "rpm30")
    check("/metrics has samples labelled with the key's name", samples, "none for rpm30")
    for name, (count, prompt, completion) in sorted(ctx.observed.items()):
        requests = key_counter(text, name, "tachyon:key_requests_total")
        tokens = (key_counter(text, name, "tachyon:key_tokens_total", kind="prompt"),
                  key_counter(text, name, "tachyon:key_tokens_total", kind="completion"))
        check(f"/metrics {name}: key_requests_total and key_tokens_total{{kind}} = what the "
              f"clients saw ({count} requests, {prompt}+{completion} tokens)",
              requests == count and tokens == (prompt, completion),
              f"{requests} requests, {tokens} tokens; samples {key_samples(text, name)}")
    in_flight = {name: key_counter(text, name, "tachyon:key_requests_in_flight")
                 for name in ctx.observed}
    check("/metrics: no key has requests in flight when all are done",
          all(v == 0 for v in in_flight.values()), in_flight)
    limited = key_counter(text, "rpm30", "tachyon:key_rejections_total", reason="requests")
    expected = ctx.rejected.get("rpm30", 0)
    check(f"/metrics: rpm30's rejections (reason requests) = the {expected} 429s clients got",
          limited == expected, f"{limited}; samples {key_samples(text, 'rpm30')}")


def test_usage(ctx: Context) -> None:
    time.sleep(0.2)
    rows = ctx.cli.usage()
    by_key = {row.get("key"): row for row in rows}
    info(f"usage --json: {rows}")
    for name, (count, prompt, completion) in sorted(ctx.observed.items()):
        row = by_key.get(name)
        if not check(f"usage --json has a row for {name}", row is not None, rows):
            continue
        finished = row["requests"] - row.get("rejected", 0) - row.get("errors", 0) - \
            row.get("cancelled", 0)
        check(f"usage {name}: {count} finished requests, {prompt} prompt + {completion} "
              f"completion tokens",
              (finished, row["prompt_tokens"], row["completion_tokens"]) ==
              (count, prompt, completion) and row["total_tokens"] == prompt + completion, row)
        check(f"usage {name}: rejected rows = the {ctx.rejected.get(name, 0)} gateway refusals "
              f"the clients saw", row.get("rejected", 0) == ctx.rejected.get(name, 0),
              f"{row.get('rejected')} vs {ctx.rejected.get(name, 0)}")
    restricted = by_key.get("restricted")
    check("usage restricted: its two 403s are rejected rows with no tokens",
          restricted is not None and restricted["requests"] == restricted["rejected"] == 2 and
          restricted["total_tokens"] == 0, restricted)
    unused = [name for name in ("doomed",) if name in by_key and
              by_key[name]["requests"] - by_key[name].get("rejected", 0) > 0]
    check("no usage for requests that were refused with 401", not unused, unused)
    only = ctx.cli.usage("--key", "rpm30")
    check("usage --key rpm30: exactly that key's row",
          len(only) == 1 and only[0] == by_key.get("rpm30"), only)
    by_key_explicit = ctx.cli.usage("--by", "key")
    check("usage --by key equals the default grouping", by_key_explicit == rows, by_key_explicit)
    today = datetime.datetime.now(datetime.timezone.utc).date()
    days = ctx.cli.usage("--by", "day")
    total = {field: sum(row[field] for row in rows)
             for field in ("requests", "prompt_tokens", "completion_tokens")}
    check("usage --by day: one row, today (UTC), totals of all keys",
          len(days) == 1 and days[0].get("day") == today.isoformat() and
          all(days[0][f] == v for f, v in total.items()), f"{days} vs {total}")
    tomorrow = (today + datetime.timedelta(days=1)).isoformat()
    check("usage --since tomorrow: nothing", ctx.cli.usage("--since", tomorrow) == [],
          ctx.cli.usage("--since", tomorrow))
    check("usage --since today: everything", ctx.cli.usage("--since", today.isoformat()) == rows,
          "differs")
    days_rpm = ctx.cli.usage("--by", "day", "--key", "rpm30")
    check("usage --by day --key rpm30: today's row = the key's row",
          len(days_rpm) == 1 and days_rpm[0]["requests"] == by_key.get("rpm30", {}).get(
              "requests"), days_rpm)


# ---- other servers ---------------------------------------------------------------------------

def test_static_keys(tachyon: str, model: str | None) -> None:
    one, two = "static-secret-one-" + "a" * 20, "static-secret-two-" + "b" * 20
    server = TachyonServer(tachyon, model, host="0.0.0.0", check_exit=False,
                           args=["-c", "2048", "--api-key", one, "--api-key", two,
                                 "--public-metrics"])
    with server:
        http = httpx.Client(base_url=server.url, timeout=120)
        model_id = http.get("/v1/models", headers=bearer(one)).json()["data"][0]["id"]
        body = {"model": model_id, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2}
        for what, headers, expected in (("no key", {}, 401), ("a wrong key", bearer("nope"), 401),
                                        ("the first --api-key", bearer(one), 200),
                                        ("the second --api-key", bearer(two), 200)):
            response = http.post("/v1/chat/completions", json=body, headers=headers)
            ok = response.status_code == expected
            if expected == 401:
                ok = ok and error_of(response).get("code") == "invalid_api_key"
            check(f"--api-key server (host 0.0.0.0): {what} → {expected}", ok, short(response))
        response = http.get("/v1/models")
        check("--api-key server: /v1/models without a key → 401", response.status_code == 401,
              short(response))
        check("--public-metrics: /metrics without a key → 200",
              http.get("/metrics").status_code == 200, "")
        check("--api-key server: /health without a key → 200",
              http.get("/health").status_code == 200, "")
        text = http.get("/metrics").text
        check("--public-metrics: the static secrets are not in /metrics",
              one not in text and two not in text, "leaked")
    check("--api-key server exits 0 on SIGTERM", server.returncode == 0, server.returncode)


def test_public_bind(tachyon: str, model: str | None) -> None:
    argv = [tachyon, "serve", "--host", "0.0.0.0", "--port", str(free_port())]
    if model:
        argv += ["-m", model]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=60)
        code = process.returncode
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate()
        code = None
    check("serve --host 0.0.0.0 without auth exits with an error",
          code not in (None, 0), f"exit {code} (None: it kept running)")
    check("… which names --insecure-no-auth", "--insecure-no-auth" in (err + out),
          (err + out)[-500:])
    info(f"its message: {(err.strip().splitlines() or [''])[-1]}")
    server = TachyonServer(tachyon, model, host="0.0.0.0", check_exit=False,
                           args=["-c", "2048", "--insecure-no-auth"])
    with server:
        status, _ = http_get(server.url + "/v1/models")
        check("serve --host 0.0.0.0 --insecure-no-auth runs, open without keys", status == 200,
              status)
    check("… and exits 0 on SIGTERM", server.returncode == 0, server.returncode)


# ---- main ------------------------------------------------------------------------------------

SECTIONS: set[str] = set()  # --sections: run only these (all when empty)


def wanted(name: str) -> bool:
    return not SECTIONS or name in SECTIONS


def run_db_server(tachyon: str, model: str | None, work: Path) -> None:
    db = work / "tachyon.db"
    cli = KeysCli(tachyon, str(db))
    ctx_keys = {
        "auth": dict(rpm=0, tpm=0, concurrency=0),
        "doomed": dict(),
        "rpm30": dict(rpm=30, tpm=0, concurrency=0),
        "tpm1k": dict(rpm=0, tpm=1000, concurrency=0),
        "headers": dict(rpm=10, tpm=50000, concurrency=0),
        "sdk": dict(rpm=20, tpm=0, concurrency=0),
        "quota": dict(rpm=0, tpm=0, concurrency=0, daily_tokens=1),
        "capped": dict(rpm=0, tpm=0, concurrency=0, max_tokens=16),
        "restricted": dict(models="other-model"),
    }
    created = {}
    for name, limits in ctx_keys.items():
        created[name] = cli.create(name, **limits)
    check("keys create --json gives sk-tachyon- secrets",
          all(c["key"].startswith("sk-tachyon-") for c in created.values()), created)
    server = TachyonServer(tachyon, model, check_exit=False,
                           args=["-c", str(CTX), "--auth", "db", "--db", str(db)])
    try:
        with server:
            ctx = Context(tachyon, cli, server)
            ctx.secrets = {name: c["key"] for name, c in created.items()}
            ctx.model = ctx.http.get("/v1/models", headers=bearer(ctx.secrets["auth"])) \
                .json()["data"][0]["id"]
            # Created while the server runs: new keys need no restart.
            ctx.create("allowed", models=ctx.model)
            for name, function in (("auth", test_auth), ("rpm", test_rpm_exact),
                                   ("tpm", test_tpm), ("headers", test_ratelimit_headers),
                                   ("caps", test_caps), ("sdk-retry", test_sdk_retry),
                                   ("sdk-quota", test_sdk_quota), ("metrics", test_metrics),
                                   ("usage", test_usage)):
                if wanted(name):
                    section(name, function, ctx)
            if results["failed"]:
                server.dump_stderr("some checks failed", last_lines=40)
    except Exception as error:  # noqa: BLE001
        check("db server ran", False, f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
    check("--auth db server exits 0 on SIGTERM", server.returncode == 0, server.returncode)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    parser.add_argument("--model", help="GGUF file (default: tachyon's default model)")
    parser.add_argument("--sections", default="",
                        help="comma-separated subset of: auth,rpm,tpm,headers,caps,sdk-retry,"
                             "sdk-quota,metrics,usage,static,bind (default: all)")
    args = parser.parse_args()
    SECTIONS.update(s for s in args.sections.split(",") if s)
    work = Path(tempfile.mkdtemp(prefix="tachyon-gateway-test-"))
    try:
        run_db_server(args.tachyon, args.model, work)
        if wanted("static"):
            section("static keys", test_static_keys, args.tachyon, args.model)
        if wanted("bind"):
            section("public bind", test_public_bind, args.tachyon, args.model)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
