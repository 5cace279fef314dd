#!/usr/bin/env python3
"""A minimal OpenAI-compatible server on llama.cpp (through llama-cpp-python's low-level API),
the peer that bench/loadgen.py measures tachyon's server against. PyPI has no llama-server
binary, so this is a small stand-in for it, built the way llama-server is:

  * one engine thread owns the llama_context and runs continuous batching: every step it puts
    one token for each generating sequence (and/or a prompt chunk, up to --batch tokens in
    all) into ONE llama_batch with per-token seq_ids, calls llama_decode once, and samples
    each sequence from its own row of logits with its own sampler chain;
  * --slots sequences at once (n_seq_max, one KV stream of --ctx cells each, or with
    --kv-unified one cache of slots x --ctx cells); further requests wait in a FIFO queue;
  * HTTP threads (stdlib ThreadingHTTPServer) parse JSON, render the chat template (jinja2, the
    GGUF's tokenizer.chat_template), tokenize, and stream SSE from the request's event queue;
    a client that hangs up mid-stream is cancelled and its slot freed.

Endpoints: POST /v1/chat/completions, POST /v1/completions (stream or not, stream_options.
include_usage), GET /v1/models[/{id}], POST /tokenize, POST /detokenize, GET /health,
GET /metrics. Request fields: max_tokens / max_completion_tokens, temperature, top_p, top_k,
min_p, seed, stop, ignore_eos. Not supported (400): n > 1, logprobs. No prefix cache: each
request prefills its whole prompt (llama-server would reuse a slot's matching prefix).

    .venv-llamacpp/bin/python bench/llamacpp_server.py [-m MODEL.gguf] [--port 8081] [-t 2]
        [--slots 16] [--ctx 2048] [--batch 512] [--alias NAME]
"""
from __future__ import annotations

import argparse
import codecs
import ctypes
import json
import queue
import random
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jinja2.sandbox
import llama_cpp.llama_cpp as L

DEFAULT_MODEL = Path.home() / ".cache/tachyon/models/SmolLM2-135M-Instruct.Q4_1.gguf"


@L.llama_log_callback
def _quiet_log(level, text, user_data):  # noqa: ARG001
    pass


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class Request:
    """One generation. HTTP thread fills the parameters; the engine thread owns the rest and
    reports through `events`: ("text", str), ("done", finish_reason, usage dict)."""

    def __init__(self, prompt: list[int], max_tokens: int, params: dict, stop: list[str], ignore_eos: bool):
        self.prompt, self.max_tokens, self.params, self.stop, self.ignore_eos = prompt, max_tokens, params, stop, ignore_eos
        self.events: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()
        # engine state
        self.seq = -1
        self.num_computed = 0       # tokens of prompt + generated already in the KV cache
        self.next_token = -1        # sampled, not yet fed back
        self.generated = 0
        self.text = ""
        self.sent = 0               # characters of self.text already sent
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.sampler = None


class Engine:
    def __init__(self, model_path: Path, threads: int, slots: int, ctx: int, n_batch: int,
                 unified: bool = False):
        L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
        L.llama_backend_init()
        model_params = L.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model_path).encode(), model_params)
        if not self.model:
            raise SystemExit(f"cannot load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        params = L.llama_context_default_params()
        params.n_ctx = ctx * slots
        params.n_seq_max = slots
        params.kv_unified = self.unified = unified
        params.n_batch = params.n_ubatch = n_batch
        params.n_threads = params.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise SystemExit("llama_init_from_model failed")
        self.memory = L.llama_get_memory(self.ctx)
        self.ctx_per_seq, self.n_batch = ctx, n_batch
        self.batch = L.llama_batch_init(n_batch, 0, 1)
        self.free_seqs = list(range(slots))
        self.turn = 0
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.inbox: queue.Queue = queue.Queue()
        self.vocab_lock = threading.Lock()
        self.template = self._chat_template()
        self.stats = {"prompt_tokens_total": 0, "generation_tokens_total": 0, "requests_total": 0}
        threading.Thread(target=self._loop, daemon=True, name="engine").start()

    # -- tokenizer (any thread) ----------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode()
        with self.vocab_lock:
            buffer = (L.llama_token * (len(data) + 8))()
            n = L.llama_tokenize(self.vocab, data, len(data), buffer, len(buffer), add_special, True)
        return list(buffer[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        buffer = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[:max(n, 0)]

    def detokenize(self, tokens: list[int]) -> str:
        with self.vocab_lock:
            return b"".join(self.piece(t) for t in tokens).decode(errors="replace")

    def _chat_template(self):
        buffer = ctypes.create_string_buffer(1 << 16)
        n = L.llama_model_meta_val_str(self.model, b"tokenizer.chat_template", buffer, len(buffer))
        if n <= 0:
            return None
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(message):
            raise ApiError(400, f"chat template: {message}", "messages")

        env.globals["raise_exception"] = raise_exception
        return env.from_string(buffer.value.decode())

    def render_chat(self, messages: list[dict]) -> str:
        if self.template is None:
            raise ApiError(400, "the model has no chat template", "messages")
        bos = self.piece(L.llama_vocab_bos(self.vocab), True).decode(errors="replace")
        eos = self.piece(L.llama_vocab_eos(self.vocab), True).decode(errors="replace")
        return self.template.render(messages=messages, add_generation_prompt=True, bos_token=bos,
                                    eos_token=eos)

    def submit(self, request: Request) -> None:
        if len(request.prompt) + request.max_tokens > self.ctx_per_seq:
            raise ApiError(400, f"This model's maximum context length is {self.ctx_per_seq} tokens. "
                                f"However, you requested {len(request.prompt) + request.max_tokens} tokens "
                                f"({len(request.prompt)} in the messages, {request.max_tokens} in the "
                                f"completion).", "messages", "context_length_exceeded")
        self.inbox.put(request)

    # -- engine thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self.waiting.append(self.inbox.get())
            while not self.inbox.empty():
                self.waiting.append(self.inbox.get_nowait())
            for request in [r for r in self.running if r.cancelled.is_set()]:
                self._release(request)
            self.waiting = [r for r in self.waiting if not r.cancelled.is_set()]
            while self.waiting and self.free_seqs:
                self._admit(self.waiting.pop(0))
            if self.running:
                self._step()

    def _admit(self, request: Request) -> None:
        request.seq = self.free_seqs.pop()
        L.llama_memory_seq_rm(self.memory, request.seq, -1, -1)
        p = request.params
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        if p["temperature"] <= 0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        else:
            if p["top_k"] > 0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(p["top_k"]))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(p["top_p"], 1))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(p["min_p"], 1))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(p["temperature"]))
            seed = p["seed"] if p["seed"] is not None else random.getrandbits(32)
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        request.sampler = chain
        self.running.append(request)
        self.stats["requests_total"] += 1

    def _release(self, request: Request) -> None:
        self.running.remove(request)
        L.llama_memory_seq_rm(self.memory, request.seq, -1, -1)
        L.llama_sampler_free(request.sampler)
        self.free_seqs.append(request.seq)

    def _step(self) -> None:
        batch, n, samples = self.batch, 0, []   # samples: (request, batch index)

        def add(token: int, pos: int, seq: int, logits: bool) -> None:
            nonlocal n
            batch.token[n], batch.pos[n], batch.n_seq_id[n], batch.logits[n] = token, pos, 1, logits
            batch.seq_id[n][0] = seq
            n += 1

        decoding = [r for r in self.running if r.next_token >= 0]
        prefilling = [r for r in self.running if r.next_token < 0 and r.num_computed < len(r.prompt)]
        if not self.unified:
            # One KV stream per sequence: llama.cpp then splits a batch into ubatches holding the
            # same number of tokens of each sequence, so a prompt chunk next to decode tokens
            # would go one token per ubatch. Alternate decode steps and one-prompt steps instead.
            if decoding and prefilling:
                self.turn ^= 1
                decoding, prefilling = (decoding, []) if self.turn else ([], prefilling)
            prefilling = prefilling[:1]
        for request in decoding:                  # one token for each generating sequence
            add(request.next_token, request.num_computed, request.seq, True)
            samples.append((request, n - 1))
            request.num_computed += 1
        for request in prefilling:                # then prompt chunks with what is left
            if n >= self.n_batch:
                break
            take = min(len(request.prompt) - request.num_computed, self.n_batch - n)
            for i in range(take):
                pos = request.num_computed + i
                add(request.prompt[pos], pos, request.seq, pos == len(request.prompt) - 1)
            request.num_computed += take
            self.stats["prompt_tokens_total"] += take
            if request.num_computed == len(request.prompt):
                samples.append((request, n - 1))
        batch.n_tokens = n
        if L.llama_decode(self.ctx, batch) != 0:
            for request in list(self.running):
                request.events.put(("error", "llama_decode failed"))
                self._release(request)
            return
        for request, index in samples:
            token = L.llama_sampler_sample(request.sampler, self.ctx, index)
            self._on_token(request, token)

    def _on_token(self, request: Request, token: int) -> None:
        if L.llama_vocab_is_eog(self.vocab, token) and not request.ignore_eos:
            return self._finish(request, "stop", request.text)
        request.generated += 1
        self.stats["generation_tokens_total"] += 1
        request.text += request.decoder.decode(self.piece(token))
        for stop in request.stop:               # a stop string ends the text before it
            at = request.text.find(stop, max(0, request.sent - len(stop)))
            if at >= 0:
                return self._finish(request, "stop", request.text[:at])
        if request.generated >= request.max_tokens or request.num_computed + 1 >= self.ctx_per_seq:
            return self._finish(request, "length", request.text + request.decoder.decode(b"", True))
        hold = max((k for s in request.stop for k in range(1, len(s))
                    if request.text.endswith(s[:k])), default=0)   # a stop string may be starting
        if len(request.text) - hold > request.sent:
            request.events.put(("text", request.text[request.sent:len(request.text) - hold]))
            request.sent = len(request.text) - hold
        request.next_token = token

    def _finish(self, request: Request, reason: str, text: str) -> None:
        if len(text) > request.sent:
            request.events.put(("text", text[request.sent:]))
        usage = {"prompt_tokens": len(request.prompt), "completion_tokens": request.generated,
                 "total_tokens": len(request.prompt) + request.generated,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        request.events.put(("done", reason, usage))
        self._release(request)


# ---- HTTP ------------------------------------------------------------------------------------

def number(body: dict, name: str, default, low: float, high: float, integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise ApiError(400, f"'{name}' must be {'an integer' if integer else 'a number'}", name)
    if not low <= value <= high:
        raise ApiError(400, f"'{name}' must be in [{low}, {high}], got {value}", name)
    return value


def parse_request(engine: Engine, body: dict, chat: bool, model_id: str) -> Request:
    if body.get("model") not in (None, model_id):
        raise ApiError(404, f"The model `{body.get('model')}` does not exist.", "model", "model_not_found")
    if number(body, "n", 1, 1, 128, True) != 1:
        raise ApiError(400, "only n = 1 is supported", "n")
    if body.get("logprobs"):
        raise ApiError(400, "logprobs are not supported by this server", "logprobs")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty array", "messages")
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
                raise ApiError(400, f"invalid message {json.dumps(m)[:100]}", "messages")
            if isinstance(m.get("content"), list):
                m["content"] = "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))
            if m["role"] == "developer":
                m["role"] = "system"
        prompt = engine.tokenize(engine.render_chat(messages))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            pass
        elif isinstance(prompt, str) and prompt:
            prompt = engine.tokenize(prompt)
        else:
            raise ApiError(400, "'prompt' must be a non-empty string or an array of token ids", "prompt")
    caps = [number(body, k, None, 1, 1 << 30, True) for k in ("max_tokens", "max_completion_tokens")]
    caps = [c for c in caps if c is not None]
    max_tokens = min(caps) if caps else (engine.ctx_per_seq - len(prompt) if chat else 16)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ApiError(400, "'stop' must be a string or an array of strings", "stop")
    params = {"temperature": number(body, "temperature", 1.0, 0, 2),
              "top_p": number(body, "top_p", 1.0, 0, 1), "top_k": number(body, "top_k", 0, 0, 1 << 20, True),
              "min_p": number(body, "min_p", 0.0, 0, 1), "seed": number(body, "seed", None, -(1 << 63), 1 << 64, True)}
    return Request(prompt, max_tokens, params, stop, bool(body.get("ignore_eos")))


def make_handler(engine: Engine, model_id: str):
    created = int(time.time())

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def send(self, status: int, payload, content_type: str = "application/json") -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", uuid.uuid4().hex)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path in ("/health", "/v1/health"):
                return self.send(200, {"status": "ok"})
            model = {"id": model_id, "object": "model", "created": created, "owned_by": "llama.cpp"}
            if self.path == "/v1/models":
                return self.send(200, {"object": "list", "data": [model]})
            if self.path == f"/v1/models/{model_id}":
                return self.send(200, model)
            if self.path == "/metrics":
                lines = [f"llamacpp:{k} {v}" for k, v in engine.stats.items()]
                lines += [f"llamacpp:requests_processing {len(engine.running)}",
                          f"llamacpp:requests_deferred {len(engine.waiting) + engine.inbox.qsize()}"]
                return self.send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")
            self.send(404, ApiError(404, f"no route GET {self.path}", code="not_found").body())

        def do_POST(self):
            try:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"null")
                except ValueError as error:
                    raise ApiError(400, f"invalid JSON body: {error}") from None
                if not isinstance(body, dict):
                    raise ApiError(400, "the body must be a JSON object")
                if self.path == "/tokenize":
                    if not isinstance(body.get("content"), str):
                        raise ApiError(400, "'content' must be a string", "content")
                    return self.send(200, {"tokens": engine.tokenize(body["content"], body.get("add_special", False))})
                if self.path == "/detokenize":
                    return self.send(200, {"content": engine.detokenize(body.get("tokens") or [])})
                if self.path not in ("/v1/chat/completions", "/v1/completions"):
                    raise ApiError(404, f"no route POST {self.path}", code="not_found")
                chat = self.path == "/v1/chat/completions"
                request = parse_request(engine, body, chat, model_id)
                engine.submit(request)
            except ApiError as error:
                return self.send(error.status, error.body())
            if body.get("stream"):
                self.stream(request, chat, bool((body.get("stream_options") or {}).get("include_usage")))
            else:
                self.complete(request, chat)

        def complete(self, request: Request, chat: bool) -> None:
            text, event = "", None
            while True:
                event = request.events.get()
                if event[0] != "text":
                    break
                text += event[1]
            if event[0] == "error":
                return self.send(500, ApiError(500, event[1], kind="server_error").body())
            _, reason, usage = event
            choice = ({"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                       "logprobs": None, "finish_reason": reason} if chat else
                      {"index": 0, "text": text, "logprobs": None, "finish_reason": reason})
            self.send(200, {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                            "object": "chat.completion" if chat else "text_completion",
                            "created": int(time.time()), "model": model_id, "choices": [choice], "usage": usage})

        def stream(self, request: Request, chat: bool, include_usage: bool) -> None:
            base = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": int(time.time()), "model": model_id}
            extra = {"usage": None} if include_usage else {}

            def choice(text=None, reason=None, first=False):
                if chat:
                    delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
                    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
                return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}

            def event(payload) -> None:
                self.wfile.write(b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n")
                self.wfile.flush()

            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.send_header("x-request-id", uuid.uuid4().hex)
                self.end_headers()
                self.close_connection = True
                if chat:
                    event({**base, "choices": [choice(first=True)], **extra})
                while True:
                    item = request.events.get()
                    if item[0] == "text":
                        event({**base, "choices": [choice(item[1])], **extra})
                    elif item[0] == "error":
                        event({"error": ApiError(500, item[1], kind="server_error").body()["error"]})
                        return
                    else:
                        event({**base, "choices": [choice(reason=item[1])], **extra})
                        if include_usage:
                            event({**base, "choices": [], "usage": item[2]})
                        event(b"[DONE]")
                        return
            except (BrokenPipeError, ConnectionResetError):
                request.cancelled.set()     # the client hung up: free the slot

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--slots", type=int, default=16, help="sequences decoded together")
    parser.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    parser.add_argument("--batch", type=int, default=512, help="tokens per llama_decode")
    parser.add_argument("--alias", help="model id (default: the file's stem)")
    parser.add_argument("--kv-unified", action="store_true",
                        help="one KV cache for all sequences (default: one stream per sequence)")
    args = parser.parse_args()
    engine = Engine(args.model.expanduser(), args.threads, args.slots, args.ctx, args.batch, args.kv_unified)
    model_id = args.alias or args.model.stem
    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024   # listen backlog (socketserver's default of 5 drops bursts)

    server = Server((args.host, args.port), make_handler(engine, model_id))
    print(f"llamacpp_server: serving {model_id} on http://{args.host}:{server.server_address[1]} "
          f"({args.slots} slots x {args.ctx} tokens)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
