"""The client of one OpenAI-compatible endpoint: bounded concurrency, retries with backoff, refusals recorded,
one cached file per request (:mod:`dsgen.endpoints.cache`). The ``openai`` generator and the ``api-judge`` ask
through it.

| mode | endpoint | what is read |
| --- | --- | --- |
| ``completions`` | ``POST {base_url}/completions`` | ``choices[0].text`` |
| ``chat`` | ``POST {base_url}/chat/completions`` | ``choices[0].message.content`` |

**Retries.** The ``openai`` client's own retries are off; a request is retried here, up to ``max_retries``
times with exponential backoff (0.5 s doubling, capped at 30 s, jittered by a hash of the request
key, at least a ``Retry-After`` the server sends), on 408, 409, 429, 5xx, timeouts and connection errors
(the statuses the ``openai`` client itself retries). 401, 403 and 404 say the setup is wrong (the key, a
permission, the route or the model), not the request: they stop the run with a one-line
:class:`~dsgen.errors.DsgenError` naming the endpoint, and cache nothing.

**Refused answers.** Any other 4xx (a 400 for a prompt beyond the context, a content filter) and an answer
that is not a completion (not JSON, no ``choices``, a ``null`` text or content) are an answer about that
request: it is cached like any other (a resume does not ask it again) as a rejected output with its reason
(``rejected_refused`` in the generator's sidecar stats, ``refused_by`` per reason), and the run goes on. The
run fails with one line, at the moment it becomes certain, when more than ``max_failed_share`` of its requests
were refused (:data:`MAX_FAILED_SHARE` says why 5%); the refused answers stay cached (ask them again with
``--fresh`` once the cause is fixed). The endpoint is asked one request before the progress bar appears, so
that an unreachable or refusing endpoint fails in one line without a bar drawn.

Example:
    >>> client = ApiClient(model="gpt-4o-mini", mode="chat", who="my tool", share_setting="max_failed_share")
    >>> s = client.sample({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]})
    >>> records, counts = client.ask([s], RequestCache(Path("answers")), "ask")    # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from dsgen.artifacts import stable_hash
from dsgen.endpoints.cache import RequestCache
from dsgen.endpoints.urls import DEFAULT_BASE_URL, check_base_url, join_url, resolve_base_url
from dsgen.redaction import redact_url, url_secrets
from dsgen.errors import DsgenError

if TYPE_CHECKING:
    from dsgen.endpoints.config import EndpointConfig

MODES = {"completions": "completions", "chat": "chat/completions"}  # mode -> path under the base URL
CLIENT_FIELDS = {"model", "prompt", "messages", "max_tokens", "temperature", "top_p", "seed"}  # the rest: extra_body
RETRIED = (408, 409, 429)  # and every 5xx: the statuses the openai client itself retries
SETUP_ERRORS = {401: "the key", 403: "a permission", 404: "the route or the model"}  # every request would get them

MAX_FAILED_SHARE = 0.05
"""The default ``max_failed_share``: a run fails when more than one request in twenty is refused. A refusal
is a hole in the sample, not an output the task's rules judged: single prompts are refused rarely (a
content filter, a prompt beyond the context: well under one in a hundred on STS sentences), while a share
of several percent means the endpoint or the settings refuse systematically (a reasoning model that spends
``max_tokens`` before any content and answers ``null``, a field the server rejects), and the answers that
did come are a subset the refusals chose (by topic, by length), not the method's data."""


@dataclass(frozen=True)
class Sample:
    """One requested sample: its (x1, label, index) and the request that draws it."""

    x1: str | None
    label: str
    index: int
    body: dict[str, Any]
    key: str
    lead: str = ""


def _one_line(text: Any, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class ApiClient:
    """Requests to one OpenAI-compatible endpoint, as the ``openai`` generator and the ``api-judge`` both ask
    them: bounded concurrency, retries with backoff, refusals recorded, one cached file per request (see the
    module docstring). Made by keyword, or from a component's :class:`~dsgen.endpoints.EndpointConfig` with
    :meth:`from_config`.

    Args:
        model: the model id the server expects.
        mode: ``completions`` or ``chat`` (:data:`MODES`).
        base_url: as configured (empty: ``$OPENAI_BASE_URL``, then OpenAI's); checked at once.
        api_key_env: the NAME of the variable holding the key.
        concurrency / max_retries / timeout: how requests travel.
        max_failed_share: the share of refused requests above which a run fails.
        who: the component, for messages (``openai generator``, ``api-judge``).
        share_setting: where the user sets ``max_failed_share`` (named in the message when it is exceeded:
            ``[generation.openai] max_failed_share``, ``[labelling] max_abstention_share``).
    """

    backoff_base = 0.5  # seconds before the first retry (doubles per retry)
    backoff_cap = 30.0  # most seconds between two tries

    def __init__(self, *, model: str, mode: str, base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 4, max_retries: int = 5, timeout: float = 60.0,
                 max_failed_share: float = MAX_FAILED_SHARE, who: str, share_setting: str) -> None:
        self._url = check_base_url(resolve_base_url(base_url))  # as given: what the requests use
        self._secrets = url_secrets(self._url)
        self.base_url = redact_url(self._url)  # what is stored, shown and keyed
        self.endpoint = join_url(self.base_url, MODES[mode])
        self.model, self.mode, self.api_key_env = model, mode, api_key_env
        self.concurrency, self.max_retries, self.timeout = concurrency, max_retries, timeout
        self.max_failed_share, self.who, self.share_setting = max_failed_share, who, share_setting

    @classmethod
    def from_config(cls, config: EndpointConfig, *, mode: str, max_failed_share: float, share_setting: str,
                    who: str | None = None) -> "ApiClient":
        """The client of ``config``'s endpoint (its model, base URL, key variable and how requests travel).

        Args:
            config: the component's endpoint settings.
            mode: ``completions`` or ``chat``.
            max_failed_share / share_setting: the share of refused requests above which a run fails, and where
                the user sets it.
            who: the component, for messages (default: ``config.who``).
        """
        return cls(model=config.model, mode=mode, base_url=config.base_url, api_key_env=config.api_key_env,
                   concurrency=config.concurrency, max_retries=config.max_retries, timeout=config.timeout,
                   max_failed_share=max_failed_share, who=config.who if who is None else who,
                   share_setting=share_setting)

    def scrub(self, text: str) -> str:
        """``text`` (a server's error, an exception's message) with the base URL's credentials masked."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "")
        if not key and self.base_url == DEFAULT_BASE_URL:
            raise DsgenError(f"the {self.who} needs an API key for {DEFAULT_BASE_URL}: set the environment "
                             f"variable {self.api_key_env} (or name another with api_key_env)")
        return key or "no-key"  # a local server takes any key

    def sample(self, body: dict[str, Any], x1: str | None = None, label: str = "", index: int = 0,
               lead: str = "") -> Sample:
        """The :class:`Sample` of the request ``body``, keyed by :func:`dsgen.identity.request_key`."""
        from dsgen.identity import request_key

        return Sample(x1, label, index, body, request_key(self.mode, self.base_url, self.model, body), lead)

    # -- asking ---------------------------------------------------------------------------------
    def ask(self, samples: Iterable[Sample], cache: RequestCache, description: str, progress: bool = True,
            window: int | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        """The record of every sample's request (a repeated request asked once), from ``cache`` where it is
        there, else asked with ``concurrency`` requests in flight, ``window`` queued at a time (default:
        ``max(concurrency, 32)``), each cached as it arrives; and the counts (``requests_made``,
        ``requests_cached``, ``requests_refused``, ``retries``). The first request is asked before the progress
        bar appears. A one-line error when more than ``max_failed_share`` of the requests are refused."""
        api_key = self.api_key()
        records: dict[str, dict[str, Any]] = {}
        todo: dict[str, Sample] = {}
        for s in samples:
            if s.key in records or s.key in todo:
                continue  # the same request twice (a repeated input): asked once
            record = cache.get(s.key)
            if record is not None:
                records[s.key] = record
            else:
                todo[s.key] = s
        refused = [r for r in records.values() if r.get("refused")]
        counts = {"requests_made": 0, "requests_cached": len(records), "requests_refused": len(refused), "retries": 0}
        total = len(records) + len(todo)
        first = refused[0].get("detail", refused[0]["refused"]) if refused else ""
        self._check_share(counts["requests_refused"], total, first, cache)
        queue = list(todo.values())
        state = {"total": total, "first": first, "window": max(self.concurrency, 32) if window is None else window}
        self._run(queue[:1], api_key, cache, records, counts, lambda n=1: None, state)  # before the bar is drawn
        from dsgen.progress import progress_bar

        with progress_bar(description, total=total, unit="requests", enabled=progress) as advance:
            advance(len(records))
            self._run(queue[1:], api_key, cache, records, counts, advance, state)
        return records, counts

    def _check_share(self, refused: int, total: int, first: str, cache: RequestCache) -> None:
        if refused > self.max_failed_share * total:
            raise DsgenError(f"{self.who}: {refused} of {total} requests to {self.endpoint} were refused, more than "
                             f"{self.share_setting} = {self.max_failed_share:g} allows (first: {first}); the refused answers "
                             f"are cached in {cache.folder}: ask them again with --fresh once the cause is fixed")

    def _run(self, todo: list[Sample], api_key: str, cache: RequestCache, records: dict[str, dict[str, Any]],
             counts: dict[str, int], advance: Callable[..., None], state: dict[str, Any]) -> None:
        """Ask for ``todo``, ``state["window"]`` requests queued at a time; each answer is cached as it arrives.
        The first fatal error (a setup error, retries run out, too many refusals) stops the run: queued
        requests are cancelled, those in flight finish (and are cached), and the error is raised."""
        if not todo:
            return
        from openai import OpenAI

        parts = urlsplit(self._url)  # the client joins paths to the URL without its query, sent as parameters
        client = OpenAI(api_key=api_key, base_url=urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
                        default_query=dict(parse_qsl(parts.query, keep_blank_values=True)), max_retries=0,
                        timeout=self.timeout)
        abort = threading.Event()
        lock = threading.Lock()
        errors: list[BaseException] = []

        def task(sample: Sample) -> None:
            if abort.is_set():
                return  # queued behind a failure: not sent
            try:
                record, retries = self._request(client, sample, abort)
                try:
                    cache.put(sample.key, record)
                except OSError as err:
                    raise DsgenError(f"{self.who}: cannot write {cache.path(sample.key)} ({err.strerror}); "
                                     "free some space or choose another --out") from None
                with lock:
                    records[sample.key] = record
                    counts["requests_made"] += 1
                    counts["retries"] += retries
                    if record.get("refused"):
                        counts["requests_refused"] += 1
                        state["first"] = state["first"] or record["detail"]
                        self._check_share(counts["requests_refused"], state["total"], state["first"], cache)
            except BaseException as exc:
                with lock:
                    if not abort.is_set():
                        errors.append(exc)  # the first failure is the one reported
                    abort.set()  # before this worker takes the next queued request
                raise
            advance(1)

        window = state["window"]
        try:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="dsgen-openai") as pool:
                for start in range(0, len(todo), window):
                    futures = [pool.submit(task, s) for s in todo[start:start + window]]
                    _, pending = wait(futures, return_when=FIRST_EXCEPTION)
                    if abort.is_set():
                        for f in pending:
                            f.cancel()
                        wait(pending)  # requests in flight finish (and are cached) or stop at their next try
                        raise errors[0]
        finally:
            client.close()

    def _request(self, client: Any, sample: Sample, abort: threading.Event) -> tuple[dict[str, Any], int]:
        """(cache record, retries) of one request, retried on 408, 409, 429, 5xx, timeouts and connection
        errors; a refusal is a record too (``refused``: its reason, ``detail``)."""
        import openai

        create = (client.chat.completions if self.mode == "chat" else client.completions).with_raw_response.create
        where = f"POST {self.endpoint}"
        last = ""
        for attempt in range(self.max_retries + 1):
            if abort.is_set():
                raise DsgenError(f"{self.who}: {where} cancelled after an earlier error")  # not reported
            retry_after = 0.0
            try:
                known = {k: v for k, v in sample.body.items() if k in CLIENT_FIELDS}
                extra = {k: v for k, v in sample.body.items() if k not in CLIENT_FIELDS}
                raw = create(**known, extra_body=extra or None)
            except openai.APIStatusError as exc:
                status = exc.status_code
                detail = self.scrub(_one_line(getattr(exc.response, "text", "") or exc.message))
                if status in SETUP_ERRORS:
                    hint = f" (check {self.api_key_env})" if status in (401, 403) else f" (check {SETUP_ERRORS[status]})"
                    raise DsgenError(f"{self.who}: {where} answered {status}: {detail}{hint}") from None
                if status not in RETRIED and status < 500:
                    return self._record(sample, None, None, f"status {status}", f"answered {status}: {detail}"), attempt
                last = f"{status}: {detail}"
                retry_after = _retry_after(exc.response.headers.get("retry-after"))
            except openai.APITimeoutError:
                last = f"no answer within {self.timeout:g} s"
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                last = f"connection error ({self.scrub(_one_line(cause, 120))})"
            else:
                return self._answer(sample, raw.http_response.text), attempt
            if attempt < self.max_retries:
                abort.wait(max(self._delay(sample.key, attempt), retry_after))
        raise DsgenError(f"{self.who}: {where} failed after {self.max_retries + 1} tries, last: {last}; run the "
                         "same command again to resume (answered requests are cached)")

    def _record(self, sample: Sample, text: str | None, response: Any, refused: str | None = None,
                detail: str = "") -> dict[str, Any]:
        record = {"key": sample.key, "endpoint": self.mode, "base_url": self.base_url, "model": self.model,
                  "request": sample.body, "response": response, "text": text}
        return {**record, "refused": refused, "detail": detail} if refused else record

    def _delay(self, key: str, attempt: int) -> float:
        """Backoff before retry ``attempt + 1``: ``backoff_base * 2**attempt``, capped, times a jitter in
        [0.5, 1) drawn from the request key (deterministic, and different for concurrent requests)."""
        jitter = 0.5 + 0.5 * int(stable_hash([key, attempt], length=8), 16) / 16**8
        return min(self.backoff_cap, self.backoff_base * 2**attempt) * jitter

    def _answer(self, sample: Sample, body: str) -> dict[str, Any]:
        """The record of a 2xx answer: its text, or a refusal when it is not a completion (not JSON, no
        ``choices``, a text or content that is not a string)."""
        def refused(reason: str, data: Any = None) -> dict[str, Any]:
            detail = f"malformed response: {reason} (body starts: {self.scrub(_one_line(body, 80))!r})"
            return self._record(sample, None, data if isinstance(data, dict) else None, reason, detail)

        try:
            data = json.loads(body)
        except ValueError:
            return refused("not JSON")
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return refused("no choices", data)
        choice = choices[0]
        if self.mode == "chat":
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
        else:
            text = choice.get("text")
        if not isinstance(text, str):
            return refused("no text", data)
        return self._record(sample, text, data)


def _retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` header asks for (capped at a minute; 0 when absent or a date)."""
    try:
        return min(60.0, max(0.0, float(value))) if value else 0.0
    except ValueError:
        return 0.0
