"""The ``openai`` generator: DINO's task specs through any OpenAI-compatible endpoint.

It asks a server (OpenAI, vLLM, SGLang, llama.cpp, ``transformers serve``) for continuations of the
task spec's instructions and keeps those that pass DINO's output rules. It cannot self-debias: an API
returns a sampled text, not the next-token distributions of the counter-instruction rows that
self-debiasing mixes in at every step (``supports_debiasing = False``).

| mode | endpoint | what is sent | what is read |
| --- | --- | --- | --- |
| ``completions`` | ``POST {base_url}/completions`` | the instruction as is (DINO's prompt) | ``choices[0].text`` |
| ``chat`` | ``POST {base_url}/chat/completions`` | the instruction before its last line break, as a user message | ``choices[0].message.content``, by the chat reply rule |

**One request per sample.** Servers such as ``transformers serve`` ignore ``n`` and ``logprobs``, so
each of the ``per_label`` samples of an (x1, label) is its own request, with a ``seed`` derived from
(run seed, prompt, sample index) (servers may ignore it too).

**Output rules**: the task spec's, as for every generator (:meth:`dsgen.taskspec.OutputFormat.judge`,
text only): DINO's text before the first closing quote, rejected when there is none (``unclosed``,
unless ``keep_unclosed``), when it is empty (``empty``), or when it holds a newline (``newline``, unless
``allow_newlines``); a structured output (JSON, numbered lines) must also parse (``unparsed``) and
gives one pair per field its spec pairs.

**Chat reply rule** (:func:`parse_chat_reply`). The instruction's last line (``Sentence 2: "``) is the
start of the answer the model is asked for; its reply is read, in this order:

1. it holds that last line: what follows it;
2. it starts with the opening mark (the quote; ``{`` or ``1. `` for a structured output): what follows it;
3. it holds the opening mark later, ended after it (a preamble such as ``Here it is: "...``): what
   follows the opening mark;
4. (quoted outputs) it holds no quote at all and is one non-empty line: the line itself, stripped (and
   without a leading ``Sentence 2:``), kept and counted as ``accepted_unquoted`` (also in ``accepted``);
5. otherwise the whole reply;

then the output rules above judge it (a structured output that the reply's end of turn leaves open is
ended there).

**Cache and resume.** Every request and its answer are one JSON file ``<out>.requests/<key>.json``,
named by :func:`dsgen.identity.request_key` (endpoint, base URL with its credentials masked, model, request
body; never the API key) and written atomically once the answer arrived. A rerun reads the files and makes
no network call; a run interrupted by a crash, a kill or a dead server resumes and repeats no completed
request. The folder is kept after success (it makes reruns free); ``resume=False`` (``--fresh``) deletes it
first. The API key is read from the environment variable named by ``api_key_env`` and is never written
anywhere.

**Retries.** The client's own retries are off; a request is retried here, up to ``max_retries``
times with exponential backoff (0.5 s doubling, capped at 30 s, jittered by a hash of the request
key, at least a ``Retry-After`` the server sends), on 408, 409, 429, 5xx, timeouts and connection errors
(the statuses the ``openai`` client itself retries). 401, 403 and 404 say the setup is wrong (the key, a
permission, the route or the model), not the request: they stop the run with a one-line
:class:`~dsgen.errors.DsgenError` naming the endpoint, and cache nothing.

**Refused answers.** Any other 4xx (a 400 for a prompt beyond the context, a content filter) and an answer
that is not a completion (not JSON, no ``choices``, a ``null`` text or content) are an answer about that
request: it is cached like any other (a resume does not ask it again) as a rejected output with its reason
(``rejected_refused`` in the sidecar's stats, ``refused_by`` per reason), and the run goes on. The run fails
with one line, at the moment it becomes certain, when more than ``max_failed_share`` of its requests were
refused (:data:`MAX_FAILED_SHARE` says why 5%); the refused answers stay cached (ask them again with
``--fresh`` once the cause is fixed). The endpoint is asked one request before the progress bar appears, so
that an unreachable or refusing endpoint fails in one line without a bar drawn.

**Credentials in the base URL.** A URL such as ``http://user:secret@host/v1`` or ``https://host/v1?api_key=...``
is used as given for the requests (its query string is sent with every request, after the endpoint's path),
and everywhere it is stored or shown (sidecar, request files, plans, keys, messages) its credentials are
masked by :func:`redact_url`: the userinfo and the value of any parameter whose name says key, token, secret,
password, auth, signature or code become ``***``. The dataset and request keys are computed from the masked
URL, so they do not change when only the credentials do (a rotated key reuses every cached answer, as a
changed ``api_key_env`` does) and can be recomputed from what the sidecar shows.

Example:
    >>> gen = OpenAIGenerator(OpenAIConfig(model="gpt-4o-mini", mode="chat"))       # doctest: +SKIP
    >>> pairs = gen.generate(["A man plays a guitar."], Path("pairs.jsonl"))        # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from dsgen.artifacts import ensure_writable_dir, stable_hash, write_json, write_sidecar
from dsgen.config import Config
from dsgen.data.pairs import Pair, write_pairs
from dsgen.errors import DsgenError
from dsgen.generation import GENERATORS
from dsgen.generation.base import GenerationContext, Generator, PairCollector
from dsgen.taskspec import FORMATS, OutputFormat, TaskSpec, load_task_spec

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MODES = {"completions": "completions", "chat": "chat/completions"}  # mode -> path under the base URL
SELF_DEBIASING = "off: an OpenAI-compatible API gives no access to the counter-instruction rows"
REJECTIONS = ("unclosed", "empty", "newline", "unparsed", "refused")
CLIENT_FIELDS = {"model", "prompt", "messages", "max_tokens", "temperature", "top_p", "seed"}  # the rest: extra_body
SET_BY_THE_CLIENT = {"model", "prompt", "messages", "seed", "stream", "n"}  # never from extra_body

# How requests travel and how many may be refused, not what they ask: left out of every key (the openai
# generator's dataset key, the api-judge's run key), so that a run resumed with other settings of these (fewer
# requests in flight after 429s, a longer timeout) reuses every cached answer.
TRANSPORT = ("concurrency", "timeout", "max_retries", "api_key_env", "chunk_inputs", "max_failed_share")

RETRIED = (408, 409, 429)  # and every 5xx: the statuses the openai client itself retries
SETUP_ERRORS = {401: "the key", 403: "a permission", 404: "the route or the model"}  # every request would get them

MAX_FAILED_SHARE = 0.05
"""The default ``max_failed_share``: a run fails when more than one request in twenty is refused. A refusal
is a hole in the sample, not an output the task's rules judged: single prompts are refused rarely (a
content filter, a prompt beyond the context: well under one in a hundred on STS sentences), while a share
of several percent means the endpoint or the settings refuse systematically (a reasoning model that spends
``max_tokens`` before any content and answers ``null``, a field the server rejects), and the answers that
did come are a subset the refusals chose (by topic, by length), not the method's data."""

CITATION = """@misc{openai-api,
  title = {{OpenAI} {API} Reference: Completions and Chat Completions},
  author = {{OpenAI}},
  howpublished = {\\url{https://platform.openai.com/docs/api-reference}},
  note = {Any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp, transformers serve); prompts and output
          rules of Schick and Sch{\\"u}tze (2021), without self-debiasing}
}"""


# -- base URLs ----------------------------------------------------------------------------------
# a query parameter whose name (split at - _ .) holds one of these words carries a credential
_SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "auth", "authorization", "sig",
                 "signature", "code", "credential", "credentials"}
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#@\s]*@")


def _secret_name(name: str) -> bool:
    return bool(_SECRET_WORDS & set(re.split(r"[-_.]", unquote(name).lower())))


def resolve_base_url(configured: str = "") -> str:
    """The API's base URL as it will be asked: ``configured``, else ``$OPENAI_BASE_URL``, else OpenAI's,
    without a trailing slash on its path (a query string stays)."""
    url = configured or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    path, sep, query = url.partition("?")
    return path.rstrip("/") + sep + query


def redact_url(url: str) -> str:
    """``url`` with its credentials masked: the userinfo (``user:secret@``) and the value of every query
    parameter named like a credential (``api_key``, ``key``, ``token``, ``access_token``, ``sig``, ``code``,
    ...) become ``***``. Anything else is kept as written (``api-version=...`` stays), so that the masked URL
    still says which endpoint was asked; works on any string, a malformed URL included."""
    url = _USERINFO.sub(lambda m: (m.group(1) or "") + "***@", url, count=1)
    head, sep, rest = url.partition("?")
    if not sep:
        return url
    query, hsep, fragment = rest.partition("#")
    parts = [f"{part.split('=', 1)[0]}=***" if "=" in part and _secret_name(part.split("=", 1)[0]) else part
             for part in query.split("&")]
    return head + sep + "&".join(parts) + hsep + fragment


def check_base_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host; else a one-line error at once (a URL without a scheme
    would otherwise reach the client, fail as a connection error and be retried)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port that is not a number
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise DsgenError(f"the base URL {redact_url(url)!r} is not an http(s) URL with a host (e.g. "
                         "http://127.0.0.1:8000/v1); set --base-url or base_url")
    return url


def join_url(base: str, path: str) -> str:
    """``path`` under ``base``'s path, the query string kept after it (``.../v1?k=v`` + ``completions`` ->
    ``.../v1/completions?k=v``)."""
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"{parts.path.rstrip('/')}/{path}", parts.query, parts.fragment))


def _url_secrets(url: str) -> list[str]:
    """The credential values ``url`` holds (userinfo parts, credential-named query values), as written and
    decoded, longest first; those of fewer than 4 characters are not scrubbed from messages (they would
    mangle ordinary words)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    values = [v for v in userinfo.split(":", 1) if userinfo]
    values += [part.split("=", 1)[1] for part in parts.query.split("&")
               if "=" in part and _secret_name(part.split("=", 1)[0])]
    found = {x for v in values for x in (v, unquote(v)) if len(x) >= 4}
    return sorted(found, key=len, reverse=True)


class MaskedUrlConfig(Config):
    """A config with a ``base_url`` whose stored form (:meth:`to_dict`: sidecars, plans, keys) has its
    credentials masked (:func:`redact_url`); the object keeps the URL as given, for the requests."""

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        return {**out, "base_url": redact_url(out["base_url"])}


def check_extra_body(extra_body: dict[str, Any], who: str) -> None:
    """A one-line error when ``extra_body`` sets a field the client sets itself."""
    clash = sorted(set(extra_body) & SET_BY_THE_CLIENT)
    if clash:
        raise DsgenError(f"{who} setting extra_body may not set {', '.join(clash)}: the {who} sets them")


@dataclass
class OpenAIConfig(MaskedUrlConfig):
    """Settings of the ``openai`` generator.

    Args:
        model: the model id the server expects (required; ``transformers serve <folder>`` expects the
            folder exactly as given on its command line).
        base_url: the API's base URL, ending in ``/v1`` (empty: ``$OPENAI_BASE_URL``, then OpenAI's); a
            credential in it is used, never stored (module docstring).
        api_key_env: the NAME of the environment variable holding the key (the key is never stored;
            a local server without a key needs none).
        task: built-in task spec name or path to a DINO-format JSON spec.
        mode: ``completions`` (the instruction as a raw prompt) or ``chat`` (a user message; see the
            chat reply rule in the module docstring).
        per_label: samples per (x1, label), one request each.
        entries_per_label: x1 sentences per label for tasks without inputs.
        temperature / top_p / max_tokens: sampling settings sent with each request.
        concurrency: requests in flight at once.
        max_retries: retries of a request on 408, 409, 429, 5xx, timeouts and connection errors.
        timeout: seconds before a request times out (then retried).
        max_failed_share: the run fails when more than this share of its requests are refused (a 4xx
            other than 401/403/404, an answer that is not a completion); :data:`MAX_FAILED_SHARE` says why 0.05.
        allow_newlines / keep_unclosed: output rules (DINO: both off).
        remove_duplicates: drop repeated (x1, x2, y).
        chunk_inputs: inputs whose requests are queued together (bounds the queue; an interrupted run
            has finished the inputs in order).
        seed: run seed; each request's ``seed`` is derived from it, the prompt and the sample index.
        extra_body: fields added to every request body, for a server's own extensions (they enter the
            request keys). ``transformers serve`` samples only when asked with
            ``{"generation_config": "{\"do_sample\": true}"}`` (else it decodes greedily, whatever the
            temperature); vLLM and llama.cpp take ``top_k`` here. OpenAI's API refuses unknown fields.
    """

    model: str = ""
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    task: str = "sts-x2"
    mode: str = "completions"
    per_label: int = 5
    entries_per_label: int = 100
    temperature: float = 1.0
    top_p: float = 0.9
    max_tokens: int = 40
    concurrency: int = 4
    max_retries: int = 5
    timeout: float = 60.0
    max_failed_share: float = MAX_FAILED_SHARE
    allow_newlines: bool = False
    keep_unclosed: bool = False
    remove_duplicates: bool = True
    chunk_inputs: int = 32
    seed: int = 42
    extra_body: dict[str, Any] = field(default_factory=dict)

    def check(self) -> "OpenAIConfig":
        """One-line errors for settings no run can use (the model is checked when a run starts)."""
        if self.mode not in MODES:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("openai generator mode", self.mode, list(MODES)))
        if self.base_url:
            check_base_url(self.base_url)
        for name in ("per_label", "entries_per_label", "max_tokens", "concurrency", "chunk_inputs"):
            if getattr(self, name) < 1:
                raise DsgenError(f"openai generator setting {name} must be at least 1 (got {getattr(self, name)})")
        if self.max_retries < 0:
            raise DsgenError(f"openai generator setting max_retries must be at least 0 (got {self.max_retries})")
        if self.timeout <= 0:
            raise DsgenError(f"openai generator setting timeout must be positive (got {self.timeout})")
        if not 0 <= self.max_failed_share <= 1:
            raise DsgenError(f"openai generator setting max_failed_share must be in [0, 1] (got {self.max_failed_share})")
        check_extra_body(self.extra_body, "openai generator")
        if not 0 < self.top_p <= 1 or self.temperature < 0:
            raise DsgenError(f"top_p must be in (0, 1] and temperature non-negative (got {self.top_p}, {self.temperature})")
        return self


# -- reading a reply -------------------------------------------------------------------------
def opening_mark(spec: TaskSpec) -> str:
    """What every instruction of ``spec`` ends with: its opening quote, or a structured output's opening
    (``{``, ``1. ``)."""
    return FORMATS[spec.output.kind][0] if spec.output.structured else next(iter(spec.instructions.values()))[-1]


def parse_chat_reply(reply: str, lead: str, output: OutputFormat | None = None, opening: str = '"',
                     allow_newlines: bool = False, keep_unclosed: bool = False) -> tuple[str | None, str | None, bool]:
    """``(text, rejected, unquoted)`` of a chat reply by the chat reply rule (module docstring).

    Args:
        reply: the assistant's message.
        lead: the instruction's last line (``Sentence 2: "``), which the answer was to start with.
        output: the spec's output format (default: DINO's, ended by ``"``); its rule judges the text.
        opening: the mark the instructions end with (``"``, ``“``, ``{``, ``1. ``).
    Returns:
        the text, why it is rejected (None: kept) and whether it was kept by rule 4 (no quote at all).
    """
    output = output or OutputFormat()
    end = output.end
    rest: str | None = None
    unquoted = False
    stripped = reply.strip()
    start = reply.find(opening)
    if lead.strip() and lead in reply:  # 1
        rest = reply.split(lead, 1)[1]
    elif stripped.startswith(opening):  # 2
        rest = stripped[len(opening):]
    elif start >= 0 and end in reply[start + len(opening):]:  # 3
        rest = reply[start + len(opening):]
    elif (not output.structured and stripped and opening not in reply and end not in reply
          and "\n" not in stripped):  # 4
        label = lead[:-len(opening)].strip() if lead.endswith(opening) else lead.strip()
        rest = stripped[len(label):].strip() if label and stripped.startswith(label) else stripped
        rest, unquoted = rest + end, bool(rest)
    if rest is None:  # 5
        rest = reply
    if output.structured and end not in rest:
        rest += end  # a chat reply's end of turn ends its structured output
    text, rejected = output.judge(rest, allow_newlines, keep_unclosed)
    return text, rejected, unquoted and rejected is None


def sample_seed(run_seed: int, prompt: Any, index: int) -> int:
    """The ``seed`` of one request: a hash of the run seed, the prompt (or messages) and the sample index."""
    return int(stable_hash([run_seed, prompt, index]), 16) % 2**31


# -- requests ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    """One requested sample: its (x1, label, index) and the request that draws it."""

    x1: str | None
    label: str
    index: int
    body: dict[str, Any]
    key: str
    lead: str = ""


class RequestCache:
    """The ``<out>.requests/`` folder: one JSON file per answered request, named by its key."""

    def __init__(self, out: Path) -> None:
        self.folder = out.with_name(out.name + ".requests")

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached record of ``key`` (an answer's text, or a refusal's reason), or None (a file that does
        not read as a record is not one)."""
        try:
            record = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(record, dict) and (isinstance(record.get("text"), str) or isinstance(record.get("refused"), str))
        return record if ok else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        write_json(self.path(key), record)

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _one_line(text: Any, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class ApiClient:
    """Requests to one OpenAI-compatible endpoint, as the ``openai`` generator and the ``api-judge`` both ask
    them: bounded concurrency, retries with backoff, refusals recorded, one cached file per request (see the
    module docstring).

    Args:
        model: the model id the server expects.
        mode: ``completions`` or ``chat``.
        base_url: as configured (empty: ``$OPENAI_BASE_URL``, then OpenAI's); checked at once.
        api_key_env: the NAME of the variable holding the key.
        concurrency / max_retries / timeout: how requests travel.
        max_failed_share: the share of refused requests above which a run fails.
        who: the component, for messages (``openai generator``, ``api-judge``).
        limit: where the user sets ``max_failed_share`` (named in the message when it is exceeded).
    """

    backoff_base = 0.5  # seconds before the first retry (doubles per retry)
    backoff_cap = 30.0  # most seconds between two tries

    def __init__(self, model: str, mode: str, base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 4, max_retries: int = 5, timeout: float = 60.0,
                 max_failed_share: float = MAX_FAILED_SHARE, who: str = "openai generator",
                 limit: str = "[generation.openai] max_failed_share") -> None:
        self._url = check_base_url(resolve_base_url(base_url))  # as given: what the requests use
        self._secrets = _url_secrets(self._url)
        self.base_url = redact_url(self._url)  # what is stored, shown and keyed
        self.endpoint = join_url(self.base_url, MODES[mode])
        self.model, self.mode, self.api_key_env = model, mode, api_key_env
        self.concurrency, self.max_retries, self.timeout = concurrency, max_retries, timeout
        self.max_failed_share, self.who, self.limit = max_failed_share, who, limit

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
                             f"{self.limit} = {self.max_failed_share:g} allows (first: {first}); the refused answers "
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


@GENERATORS.register("openai")
class OpenAIGenerator(Generator):
    """Pairs from any OpenAI-compatible endpoint, with DINO's prompts and output rules (see the module docstring).

    Example:
        >>> cfg = OpenAIConfig(model="HuggingFaceTB/SmolLM2-135M-Instruct", base_url="http://127.0.0.1:8000/v1")
        >>> gen = OpenAIGenerator(cfg)                                                   # doctest: +SKIP
        >>> pairs = gen.generate(["A man plays a guitar."], Path("pairs.jsonl"))        # doctest: +SKIP
    """

    config_class = OpenAIConfig
    citation = CITATION
    version = 1
    supports_debiasing = False

    def __init__(self, config: OpenAIConfig | None = None) -> None:
        self.config = (config or OpenAIConfig()).check()

    @classmethod
    def build(cls, config: OpenAIConfig, context: GenerationContext) -> "OpenAIGenerator":
        return cls(config)

    # the settings of the debiased core an API has an equivalent for (everything else is the core's own)
    SAME = ("task", "per_label", "entries_per_label", "allow_newlines", "keep_unclosed", "remove_duplicates",
            "chunk_inputs", "seed")
    SAMPLING = {"top_p": "top_p", "max_new_tokens": "max_tokens", "temperature": "temperature"}

    @classmethod
    def adapt(cls, core: Any, what: str = "these settings") -> tuple[dict[str, Any], dict[str, str]]:
        """A method's generation settings for the debiased core (a resolved ``GenerationConfig``) as this
        generator's, and notes on what an API cannot do (for ``dsgen plan``). A method that needs
        self-debiasing (lambda > 0 against counter-instructions) is refused with one line: an API returns
        sampled text, not the counter rows' next-token distributions."""
        spec = load_task_spec(core.task)
        debiased = core.counter_labels and core.sampling.decay_constant > 0 and any(spec.counter_labels.values())
        if debiased:
            hint = ("use a local generator, or a method without it (e.g. dino-decay0)" if what.startswith("method")
                    else "use a local generator, or --decay 0 or --no-counter-labels")
            raise DsgenError(f"{what} need{'s' if what.startswith('method') else ''} self-debiasing (lambda "
                             f"{core.sampling.decay_constant:g} against counter-instructions), which an "
                             f"OpenAI-compatible API cannot apply (it gives no access to the counter rows); {hint}")
        settings = {k: getattr(core, k) for k in cls.SAME}
        settings.update({ours: getattr(core.sampling, theirs) for theirs, ours in cls.SAMPLING.items()})
        settings["mode"] = "chat" if spec.chat else "completions"
        notes = {"sampling.decay_constant": "0 (self-debiasing off: an API gives no access to the counter rows)"}
        if core.sampling.top_k == 1:
            settings["temperature"] = 0.0  # greedy, as top-k 1 is
            notes["sampling.top_k"] = "1: greedy, as temperature 0"
        elif core.sampling.top_k:
            notes["sampling.top_k"] = f"{core.sampling.top_k} not applied (the OpenAI API has no top-k; vLLM and "\
                                      "llama.cpp take one in extra_body)"
        if core.max_attempts > 1:
            notes["max_attempts"] = f"{core.max_attempts}: one try per sample (no retry of rejected outputs)"
        if not core.sampling.suppress_eos:
            notes["sampling.suppress_eos"] = "False: the server decides when an answer ends"
        if not spec.needs_inputs and core.top_k_without_inputs:
            notes["top_k_without_inputs"] = f"{core.top_k_without_inputs} not applied (no top-k)"
        return settings, notes

    # -- settings ------------------------------------------------------------------------------
    @cached_property
    def client(self) -> ApiClient:
        """The endpoint's client (the base URL resolved and checked here)."""
        cfg = self.config
        return ApiClient(cfg.model, cfg.mode, cfg.base_url, cfg.api_key_env, cfg.concurrency, cfg.max_retries,
                         cfg.timeout, cfg.max_failed_share)

    @property
    def base_url(self) -> str:
        """The API's base URL (the config's, else ``$OPENAI_BASE_URL``, else OpenAI's), credentials masked."""
        return self.client.base_url

    @property
    def endpoint(self) -> str:
        return self.client.endpoint

    def get_config_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.config.to_dict().items() if k not in TRANSPORT}

    def needs_inputs(self) -> bool:
        return load_task_spec(self.config.task).needs_inputs

    def spec(self, with_inputs: bool | None = None) -> TaskSpec:
        spec = load_task_spec(self.config.task, with_inputs=with_inputs)
        if spec.chat and self.config.mode != "chat":
            raise DsgenError(f"task spec {spec.source or spec.name} is a chat spec; run the openai generator with "
                             "mode = \"chat\" (a completions endpoint applies no chat template)")
        return spec

    def dataset_key(self, inputs: list[str] | None) -> str:
        from dsgen.identity import dataset_key, texts_key

        spec = self.spec(with_inputs=inputs is not None)
        return dataset_key(self.name, self.version, self.get_config_dict(), texts_key(inputs), spec.to_dict(),
                           {"api": self.base_url, "model": self.config.model})

    def api_key(self) -> str:
        return self.client.api_key()

    # -- planning ------------------------------------------------------------------------------
    def samples(self, spec: TaskSpec, inputs: list[str] | None) -> list[Sample]:
        """Every sample of the run, input-major, with the request that draws it."""
        cfg, client = self.config, self.client
        sampling = {"max_tokens": cfg.max_tokens, "temperature": cfg.temperature, "top_p": cfg.top_p, **cfg.extra_body}

        def sample(x1: str | None, label: str, index: int) -> Sample:
            if cfg.mode == "chat":
                messages, lead = spec.turns(label, x1)  # the split a local chat template gets (TaskSpec.turns)
                body = {"model": cfg.model, "messages": messages, **sampling,
                        "seed": sample_seed(cfg.seed, messages, index)}
            else:
                lead, instruction = "", spec.instruction(label, x1)
                body = {"model": cfg.model, "prompt": instruction, **sampling,
                        "seed": sample_seed(cfg.seed, instruction, index)}
            return client.sample(body, x1, label, index, lead)

        if inputs is not None:
            return [sample(x1, label, i) for x1 in inputs for label in spec.labels for i in range(cfg.per_label)]
        return [sample(None, label, i) for i in range(cfg.entries_per_label) for label in spec.labels]

    # -- running -------------------------------------------------------------------------------
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True, resume: bool = True) -> list[Pair]:
        cfg = self.config
        if not cfg.model:
            raise DsgenError("the openai generator needs a model: set model (e.g. --generator openai:<model>)")
        out = Path(out)
        spec = self.spec(with_inputs=inputs is not None)
        samples = self.samples(spec, inputs)
        key = self.dataset_key(inputs)
        self.api_key()  # before anything is written
        ensure_writable_dir(out.parent)
        cache = RequestCache(out)
        if not resume:
            cache.clear()
        started = time.perf_counter()
        per_input = len(spec.labels) * (cfg.per_label if inputs is not None else 1)
        records, counts = self.client.ask(samples, cache, f"generate {spec.name} via {cfg.model}", progress,
                                          window=max(cfg.concurrency, cfg.chunk_inputs * per_input))
        pairs, stats = self._assemble(samples, records, spec, inputs is not None)
        stats.update(counts)
        served = sorted({str(r["response"].get("model")) for r in records.values()
                         if isinstance(r.get("response"), dict) and r["response"].get("model")})
        write_sidecar(out, kind="generated-pairs", generator_name=self.name, config=cfg.to_dict(),
                      task_spec=spec.to_dict(), dataset_key=key,
                      generator={"api": self.base_url, "model": cfg.model, "endpoint": self.endpoint,
                                 "served_models": served},
                      seed=cfg.seed, n_inputs=len(inputs) if inputs is not None else None, n_pairs=len(pairs),
                      stats=stats, self_debiasing=SELF_DEBIASING, request_cache=cache.folder.name,
                      timings={"generate_seconds": round(time.perf_counter() - started, 2)})
        write_pairs(out, pairs)  # last: the pairs file appearing is what marks the run complete
        return pairs

    def _assemble(self, samples: list[Sample], records: dict[str, dict[str, Any]], spec: TaskSpec,
                  with_inputs: bool) -> tuple[list[Pair], dict[str, Any]]:
        """Pairs in sample order (accepted outputs, duplicates removed; a structured output gives one
        pair per field its spec pairs) and the counts: sampled, accepted (of which ``accepted_unquoted``
        by rule 4 of the chat reply rule), rejected by reason (the spec's output rule: ``unclosed``,
        ``empty``, ``newline``, ``unparsed``; ``refused``: the server gave no completion, counted per
        reason in ``refused_by``), duplicates."""
        cfg = self.config
        output, opening = spec.output, opening_mark(spec)
        stats: dict[str, Any] = {"sampled": 0, "accepted": 0, "accepted_unquoted": 0,
                                 **{f"rejected_{r}": 0 for r in REJECTIONS}, "refused_by": {}, "duplicates": 0}
        collect = PairCollector(output, with_inputs, cfg.remove_duplicates)
        for s in samples:
            record = records[s.key]
            stats["sampled"] += 1
            if record.get("refused"):
                stats["rejected_refused"] += 1
                stats["refused_by"][record["refused"]] = stats["refused_by"].get(record["refused"], 0) + 1
                continue
            raw = record["text"]
            if cfg.mode == "chat":
                text, rejected, unquoted = parse_chat_reply(raw, s.lead, output, opening, cfg.allow_newlines,
                                                            cfg.keep_unclosed)
            else:
                (text, rejected), unquoted = output.judge(raw, cfg.allow_newlines, cfg.keep_unclosed), False
            if rejected is not None or text is None:
                stats[f"rejected_{rejected}"] = stats.get(f"rejected_{rejected}", 0) + 1
                continue
            stats["accepted"] += 1
            stats["accepted_unquoted"] += int(unquoted)
            collect.add(s.x1, s.label, text, {"sample": s.index})
        stats["duplicates"] = collect.duplicates
        stats["refused_by"] = dict(sorted(stats["refused_by"].items()))
        return collect.pairs, stats


def _retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` header asks for (capped at a minute; 0 when absent or a date)."""
    try:
        return min(60.0, max(0.0, float(value))) if value else 0.0
    except ValueError:
        return 0.0
