"""A small scripted OpenAI-compatible server on 127.0.0.1 for the ``openai`` generator's tests.

It answers ``POST /v1/completions`` and ``POST /v1/chat/completions`` deterministically: the text is
a function of the prompt (or messages) and the request's ``seed`` (:func:`completion_text`,
:func:`chat_text`), varied so that every output rule is exercised. Like ``transformers serve`` it
refuses fields it does not know (422). A test can script what the first requests get (a 429, a 500,
a malformed body), make the server die after k answers (:attr:`die_after`: it stops listening, as a
killed server), or hold every request after k answers until :meth:`release` (to kill the client
mid-run). It counts what it received and answered per request (prompt, seed), and keeps each request's
query parameters and ``Authorization`` header. A request that asks for ``logprobs`` is a judge's: it is
answered as a judge model writes its score (:func:`judge_tokens`), token by token.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

KNOWN_FIELDS = {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                "n", "stop", "stream", "logprobs", "top_logprobs"}
DIGITS = [str(d) for d in range(6)]
WORDS = ["a", "man", "woman", "cat", "dog", "plays", "reads", "guitar", "book", "park", "small", "red"]

HTML = {"status": 200, "body": "<html><body>502 Bad Gateway</body></html>", "content_type": "text/html"}
RATE_LIMITED = {"status": 429, "body": json.dumps({"error": {"message": "Rate limit reached", "type": "requests"}}),
                "headers": {"Retry-After": "0"}}
SERVER_ERROR = {"status": 500, "body": json.dumps({"error": {"message": "internal error"}})}


def _hash(*parts: Any) -> int:
    return int(hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest(), 16)


def _sentence(h: int) -> str:
    return " ".join(WORDS[(h >> (5 * i)) % len(WORDS)] for i in range(5)).capitalize() + "."


def _triplet(h: int) -> str:
    return json.dumps({"S1": _sentence(h >> 8), "S2": _sentence(h >> 40), "S3": _sentence(h >> 72)})


def digit_logprobs(what: Any) -> dict[str, float]:
    """Log-probabilities of the answers "0" ... "5" (and a word) for a prompt: a judge's next token, as a
    server that gives logprobs returns them; deterministic in the prompt."""
    import math

    h = _hash(what, "logprobs")
    weights = [1 + (h >> (4 * i)) % 7 for i in range(len(DIGITS))]
    total = sum(weights) + 2
    out = {d: math.log(w / total) for d, w in zip(DIGITS, weights)}
    out[" The"] = math.log(2 / total)
    return out


JUDGE_STYLES = ("space", "token", "words", "none", "out-of-range")


def judge_tokens(what: Any, style: str | None = None) -> list[tuple[str, dict[str, float]]]:
    """A judge's answer as (token, top log-probabilities at that position), as a server that gives logprobs
    returns it; the digits' distribution is :func:`digit_logprobs` wherever the score is written.

    Styles (None: ``space`` or ``token``, by the prompt): ``space``, SmolLM2's tokenizer: a space token, then
    the digit (``" "``, ``"4"``); ``token``, a GPT-style tokenizer: the spaced digit is one token (``" 4"``);
    ``words``: words before the digit (``" about"``, ``" "``, ``"4"``); ``none``: no number (``" The"``,
    ``" two"``); ``out-of-range``: a number above the scale (``" "``, ``"7"``)."""
    import math

    digits = digit_logprobs(what)
    best = max((d for d in digits if d.strip().isdigit()), key=digits.get)
    style = style or ("space", "token")[_hash(what, "style") % 2]
    space = {" ": math.log(0.9), " The": math.log(0.06), "\n": math.log(0.04)}
    if style == "space":
        return [(" ", space), (best, digits)]
    if style == "token":
        return [(f" {best}", {(f" {t}" if t.isdigit() else t): v for t, v in digits.items()})]
    if style == "words":
        return [(" about", {" about": math.log(0.7), " 3": math.log(0.3)}), (" ", space), (best, digits)]
    if style == "none":
        return [(" The", {" The": math.log(0.8), " ": math.log(0.2)}), (" two", {" two": math.log(0.9)})]
    if style == "out-of-range":
        return [(" ", space), ("7", {"7": math.log(0.8), "4": math.log(0.2)})]
    raise ValueError(f"unknown judge style {style!r}")


def completion_text(prompt: str, seed: Any) -> str:
    """A continuation of ``prompt`` (as a base LM would write it after an opening quote, or after the
    ``{`` of a JSON output)."""
    h = _hash(prompt, seed)
    if prompt.endswith("{"):
        return _triplet(h)[1:] + "\n\nNext" if h % 4 else ' "S1": "only one field"}'
    kind = h % 8
    if kind == 0:
        return _sentence(h >> 8) + " and so on without end"  # unclosed
    if kind == 1:
        return 'A sentence\nthat breaks."'  # newline
    if kind == 2:
        return '"\nSentence 3: "'  # empty
    if kind == 3:
        return 'The same sentence every time."\n'  # a duplicate within an (x1, label)
    return _sentence(h >> 8) + '"\nSentence 3: "' + _sentence(h >> 40)


def chat_text(messages: list[dict[str, str]], seed: Any) -> str:
    """A chat model's reply, in the shapes real ones take."""
    h = _hash(messages, seed)
    if "JSON" in messages[-1]["content"]:
        return [_triplet(h), f"Here you are:\n```json\n{_triplet(h)}\n```", "I cannot do that."][h % 3]
    s = _sentence(h >> 8)
    return [f'Sentence 2: "{s}"', f'"{s}"', s, f'Here it is: "{s}" Hope it helps.', f"Sure!\n{s}",
            f'Sentence 2: "{s}'][h % 6]


class FakeOpenAIServer:
    """The server, run in a thread; ``url`` is its ``/v1`` base URL.

    Args:
        port: 0 for a free port; a former server's port to restart "the same" server.
        script: responses (``{"status", "body", "content_type", "headers"}``) for the first requests, in order.
        die_after: stop listening once this many requests were answered.
        hold_after: answer this many requests, then hold every further one until :meth:`release` and
            drop it unanswered.
        delay: seconds each completion takes (to see how many requests a client keeps in flight).
        logprobs: answer a request's ``logprobs`` with the top log-probabilities of every answer token
            (False: ignore it, as ``transformers serve`` does).
        judge_style: how a judge writes its score (:func:`judge_tokens`; None: by the prompt).
    """

    def __init__(self, port: int = 0, script: list[dict[str, Any]] | None = None, die_after: int | None = None,
                 hold_after: int | None = None, delay: float = 0.0, logprobs: bool = True,
                 judge_style: str | None = None) -> None:
        self.logprobs = logprobs
        self.judge_style = judge_style
        self.script = list(script or [])
        self.die_after = die_after
        self.hold_after = hold_after
        self.delay = delay
        self.admitted = 0  # requests let through to be answered
        self.in_flight = 0
        self.max_in_flight = 0
        self.stop_lock = threading.Lock()
        self.received: Counter = Counter()  # (path, prompt or messages, seed) -> requests received
        self.answered: Counter = Counter()  # ... -> completions sent
        self.authorization: list[str] = []
        self.queries: list[dict[str, str]] = []  # each request's query parameters
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread: threading.Thread | None = None
        self.stopped = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def total_answered(self) -> int:
        with self.lock:
            return sum(self.answered.values())

    def start(self) -> "FakeOpenAIServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (returns once the port is free, whoever called it first)."""
        with self.stop_lock:
            if self.stopped:
                return
            self.stopped = True
            self.released.set()
            self.httpd.shutdown()
            self.httpd.server_close()

    def release(self) -> None:
        self.released.set()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the handler -----------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: str, content_type: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path in ("/health", "/v1/health"):
                    self._send(200, json.dumps({"status": "ok"}))
                else:
                    self._send(404, json.dumps({"error": "not found"}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path, _, query = self.path.partition("?")
                chat = path == "/v1/chat/completions"
                if path not in ("/v1/completions", "/v1/chat/completions"):
                    self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                    return
                unknown = set(body) - KNOWN_FIELDS
                if unknown:
                    self._send(422, json.dumps({"detail": f"Unexpected fields in the request: {sorted(unknown)}"}))
                    return
                what = body.get("messages") if chat else body.get("prompt")
                key = (path, json.dumps(what, sort_keys=True), body.get("seed"))
                with server.lock:
                    server.received[key] += 1
                    server.authorization.append(self.headers.get("Authorization", ""))
                    server.queries.append(dict(parse_qsl(query, keep_blank_values=True)))
                    server.bodies.append(body)
                    scripted = server.script.pop(0) if server.script else None
                    held = scripted is None and server.hold_after is not None and server.admitted >= server.hold_after
                    server.admitted += scripted is None and not held
                if scripted is not None:
                    self._send(scripted.get("status", 200), scripted["body"], scripted.get("content_type", "application/json"),
                               scripted.get("headers"))
                    return
                if held:
                    server.released.wait()
                    self.close_connection = True  # dropped unanswered
                    return
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                time.sleep(server.delay)
                with server.lock:
                    server.in_flight -= 1
                judged = None  # a judge's request (it asks for logprobs): its answer, token by token
                if body.get("logprobs"):
                    judged = judge_tokens(what, server.judge_style)[:body.get("max_tokens") or 16]
                logprobs = judged if judged is not None and server.logprobs else None
                if chat:
                    text = "".join(t for t, _ in judged) if judged is not None else chat_text(what, body.get("seed"))
                    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    if logprobs is not None:
                        choice["logprobs"] = {"content": [{"token": t, "logprob": top.get(t, -9.0), "top_logprobs": [
                            {"token": k, "logprob": v} for k, v in top.items()]} for t, top in logprobs]}
                    obj = "chat.completion"
                else:
                    text = "".join(t for t, _ in judged) if judged is not None else completion_text(what,
                                                                                                    body.get("seed"))
                    lp = None if logprobs is None else {"tokens": [t for t, _ in logprobs], "token_logprobs": [
                        top.get(t, -9.0) for t, top in logprobs], "top_logprobs": [top for _, top in logprobs]}
                    choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": "length"}
                    obj = "text_completion"
                reply = {"id": f"fake-{len(server.bodies)}", "object": obj, "created": int(time.time()),
                         "model": body.get("model"), "choices": [choice],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}}
                self._send(200, json.dumps(reply))
                with server.lock:
                    server.answered[key] += 1
                    dies = server.die_after is not None and sum(server.answered.values()) >= server.die_after
                if dies:
                    threading.Thread(target=server.stop, daemon=True).start()

        return Handler
