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

**Cache and resume.** Every request and its response are one JSON file
``<out>.requests/<key>.json``, named by :func:`dsgen.identity.request_key` (endpoint, base URL, model,
request body; never the API key) and written atomically once a valid response arrived. A rerun reads
the files and makes no network call; a run interrupted by a crash, a kill or a dead server resumes
and repeats no completed request. The folder is kept after success (it makes reruns free);
``resume=False`` (``--fresh``) deletes it first. The API key is read from the environment variable
named by ``api_key_env`` and is never written anywhere.

**Retries.** The client's own retries are off; a request is retried here, up to ``max_retries``
times with exponential backoff (0.5 s doubling, capped at 30 s, jittered by a hash of the request
key, at least a ``Retry-After`` the server sends), on 429, 5xx, timeouts and connection errors. Any
other 4xx, or a malformed response (not JSON, no ``choices``, text not a string), stops the run with
a one-line :class:`~dsgen.errors.DsgenError` naming the endpoint and what was wrong, and caches
nothing for that request.

Example:
    >>> gen = OpenAIGenerator(OpenAIConfig(model="gpt-4o-mini", mode="chat"))       # doctest: +SKIP
    >>> pairs = gen.generate(["A man plays a guitar."], Path("pairs.jsonl"))        # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dsgen.artifacts import ensure_writable_dir, stable_hash, write_json, write_sidecar
from dsgen.config import Config
from dsgen.data.pairs import Pair, write_pairs
from dsgen.errors import DsgenError
from dsgen.generation import GENERATORS
from dsgen.generation.base import GenerationContext, Generator, PairCollector
from dsgen.taskspec import FORMATS, OutputFormat, TaskSpec, load_task_spec

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def resolve_base_url(configured: str = "") -> str:
    """The API's base URL as it will be asked: ``configured``, else ``$OPENAI_BASE_URL``, else OpenAI's."""
    return (configured or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
MODES = {"completions": "completions", "chat": "chat/completions"}  # mode -> path under the base URL
SELF_DEBIASING = "off: an OpenAI-compatible API gives no access to the counter-instruction rows"
REJECTIONS = ("unclosed", "empty", "newline", "unparsed")
CLIENT_FIELDS = {"model", "prompt", "messages", "max_tokens", "temperature", "top_p", "seed"}  # the rest: extra_body

CITATION = """@misc{openai-api,
  title = {{OpenAI} {API} Reference: Completions and Chat Completions},
  author = {{OpenAI}},
  howpublished = {\\url{https://platform.openai.com/docs/api-reference}},
  note = {Any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp, transformers serve); prompts and output
          rules of Schick and Sch{\\"u}tze (2021), without self-debiasing}
}"""


@dataclass
class OpenAIConfig(Config):
    """Settings of the ``openai`` generator.

    Args:
        model: the model id the server expects (required; ``transformers serve <folder>`` expects the
            folder exactly as given on its command line).
        base_url: the API's base URL, ending in ``/v1`` (empty: ``$OPENAI_BASE_URL``, then OpenAI's).
        api_key_env: the NAME of the environment variable holding the key (the key is never stored;
            a local server without a key needs none).
        task: built-in task spec name or path to a DINO-format JSON spec.
        mode: ``completions`` (the instruction as a raw prompt) or ``chat`` (a user message; see the
            chat reply rule in the module docstring).
        per_label: samples per (x1, label), one request each.
        entries_per_label: x1 sentences per label for tasks without inputs.
        temperature / top_p / max_tokens: sampling settings sent with each request.
        concurrency: requests in flight at once.
        max_retries: retries of a request on 429, 5xx, timeouts and connection errors.
        timeout: seconds before a request times out (then retried).
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
        for name in ("per_label", "entries_per_label", "max_tokens", "concurrency", "chunk_inputs"):
            if getattr(self, name) < 1:
                raise DsgenError(f"openai generator setting {name} must be at least 1 (got {getattr(self, name)})")
        if self.max_retries < 0:
            raise DsgenError(f"openai generator setting max_retries must be at least 0 (got {self.max_retries})")
        if self.timeout <= 0:
            raise DsgenError(f"openai generator setting timeout must be positive (got {self.timeout})")
        clash = sorted(set(self.extra_body) & {"model", "prompt", "messages", "seed", "stream", "n"})
        if clash:
            raise DsgenError(f"openai generator setting extra_body may not set {', '.join(clash)}: the generator sets them")
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
        """The cached record of ``key``, or None (a file that does not read as a record is not one)."""
        try:
            record = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and isinstance(record.get("text"), str) else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        write_json(self.path(key), record)

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _one_line(text: Any, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
    backoff_base = 0.5  # seconds before the first retry (doubles per retry)
    backoff_cap = 30.0  # most seconds between two tries

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
    @property
    def base_url(self) -> str:
        """The API's base URL: the config's, else ``$OPENAI_BASE_URL``, else OpenAI's."""
        return resolve_base_url(self.config.base_url)

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/{MODES[self.config.mode]}"

    # how requests travel, not what they ask: left out of the dataset key, so that a run resumed with other
    # settings of these (fewer requests in flight after 429s) reuses every cached answer
    TRANSPORT = ("concurrency", "timeout", "max_retries", "api_key_env", "chunk_inputs")

    def get_config_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.config.to_dict().items() if k not in self.TRANSPORT}

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
        key = os.environ.get(self.config.api_key_env, "")
        if not key and self.base_url == DEFAULT_BASE_URL:
            raise DsgenError(f"the openai generator needs an API key for {DEFAULT_BASE_URL}: set the environment "
                             f"variable {self.config.api_key_env} (or name another with api_key_env)")
        return key or "no-key"  # a local server takes any key

    # -- planning ------------------------------------------------------------------------------
    def samples(self, spec: TaskSpec, inputs: list[str] | None) -> list[Sample]:
        """Every sample of the run, input-major, with the request that draws it."""
        from dsgen.identity import request_key

        cfg = self.config
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
            return Sample(x1, label, index, body, request_key(cfg.mode, self.base_url, cfg.model, body), lead)

        if inputs is not None:
            return [sample(x1, label, i) for x1 in inputs for label in spec.labels for i in range(cfg.per_label)]
        return [sample(None, label, i) for i in range(cfg.entries_per_label) for label in spec.labels]

    # -- running -------------------------------------------------------------------------------
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True, resume: bool = True) -> list[Pair]:
        from dsgen.progress import progress_bar

        cfg = self.config
        if not cfg.model:
            raise DsgenError("the openai generator needs a model: set model (e.g. --generator openai:<model>)")
        out = Path(out)
        spec = self.spec(with_inputs=inputs is not None)
        samples = self.samples(spec, inputs)
        key = self.dataset_key(inputs)
        api_key = self.api_key()
        ensure_writable_dir(out.parent)
        cache = RequestCache(out)
        if not resume:
            cache.clear()
        started = time.perf_counter()
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
        counts = {"requests_made": 0, "requests_cached": len(records), "retries": 0}
        with progress_bar(f"generate {spec.name} via {cfg.model}", total=len(records) + len(todo),
                          unit="requests", enabled=progress) as advance:
            advance(len(records))
            per_input = len(spec.labels) * (cfg.per_label if inputs is not None else 1)
            self.run_requests(list(todo.values()), api_key, cache, records, counts, advance, per_input)

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

    def run_requests(self, todo: list[Sample], api_key: str, cache: RequestCache, records: dict[str, dict[str, Any]],
             counts: dict[str, int], advance: Callable[..., None], per_input: int) -> None:
        """Ask for ``todo`` with ``concurrency`` requests in flight, queued ``chunk_inputs`` inputs at a time;
        each answer is cached as it arrives. The first fatal error stops the run: queued requests are
        cancelled, those in flight finish (and are cached), and the error is raised."""
        if not todo:
            return
        from openai import OpenAI

        cfg = self.config
        client = OpenAI(api_key=api_key, base_url=self.base_url, max_retries=0, timeout=cfg.timeout)
        abort = threading.Event()
        lock = threading.Lock()
        window = max(cfg.concurrency, cfg.chunk_inputs * per_input)

        errors: list[BaseException] = []

        def task(sample: Sample) -> None:
            if abort.is_set():
                return  # queued behind a failure: not sent
            try:
                record, retries = self._request(client, sample, abort)
                try:
                    cache.put(sample.key, record)
                except OSError as err:
                    raise DsgenError(f"openai generator: cannot write {cache.path(sample.key)} ({err.strerror}); "
                                     "free some space or choose another --out") from None
            except BaseException as exc:
                with lock:
                    if not abort.is_set():
                        errors.append(exc)  # the first failure is the one reported
                    abort.set()  # before this worker takes the next queued request
                raise
            with lock:
                records[sample.key] = record
                counts["requests_made"] += 1
                counts["retries"] += retries
            advance(1)

        try:
            with ThreadPoolExecutor(max_workers=cfg.concurrency, thread_name_prefix="dsgen-openai") as pool:
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
        """(cache record, retries) of one request, retried on 429, 5xx, timeouts and connection errors."""
        import openai

        cfg = self.config
        create = (client.chat.completions if cfg.mode == "chat" else client.completions).with_raw_response.create
        where = f"POST {self.endpoint}"
        last = ""
        for attempt in range(cfg.max_retries + 1):
            if abort.is_set():
                raise DsgenError(f"openai generator: {where} cancelled after an earlier error")  # not reported
            retry_after = 0.0
            try:
                known = {k: v for k, v in sample.body.items() if k in CLIENT_FIELDS}
                extra = {k: v for k, v in sample.body.items() if k not in CLIENT_FIELDS}
                raw = create(**known, extra_body=extra or None)
            except openai.APIStatusError as exc:
                status = exc.status_code
                detail = _one_line(getattr(exc.response, "text", "") or exc.message)
                if status != 429 and status < 500:
                    hint = f" (check {cfg.api_key_env})" if status in (401, 403) else ""
                    raise DsgenError(f"openai generator: {where} answered {status}: {detail}{hint}") from None
                last = f"{status}: {detail}"
                retry_after = _retry_after(exc.response.headers.get("retry-after"))
            except openai.APITimeoutError:
                last = f"no answer within {cfg.timeout:g} s"
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                last = f"connection error ({_one_line(cause, 120)})"
            else:
                text, response = self._parse(raw.http_response, where)
                record = {"key": sample.key, "endpoint": cfg.mode, "base_url": self.base_url, "model": cfg.model,
                          "request": sample.body, "response": response, "text": text}
                return record, attempt
            if attempt < cfg.max_retries:
                abort.wait(max(self._delay(sample.key, attempt), retry_after))
        raise DsgenError(f"openai generator: {where} failed after {cfg.max_retries + 1} tries, last: {last}; run the "
                         "same command again to resume (answered requests are cached)")

    def _delay(self, key: str, attempt: int) -> float:
        """Backoff before retry ``attempt + 1``: ``backoff_base * 2**attempt``, capped, times a jitter in
        [0.5, 1) drawn from the request key (deterministic, and different for concurrent requests)."""
        jitter = 0.5 + 0.5 * int(stable_hash([key, attempt], length=8), 16) / 16**8
        return min(self.backoff_cap, self.backoff_base * 2**attempt) * jitter

    def _parse(self, response: Any, where: str) -> tuple[str, dict[str, Any]]:
        """(text, JSON body) of an answer; a one-line error for anything that is not a completion."""
        body = response.text

        def bad(what: str) -> DsgenError:
            return DsgenError(f"openai generator: {where} gave a malformed response: {what} "
                              f"(body starts: {_one_line(body, 80)!r}); nothing was cached for it")

        try:
            data = json.loads(body)
        except ValueError:
            raise bad("not JSON") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise bad("no choices")
        choice = choices[0]
        if self.config.mode == "chat":
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
            if not isinstance(text, str):
                raise bad("choices[0].message.content is not a string")
        else:
            text = choice.get("text")
            if not isinstance(text, str):
                raise bad("choices[0].text is not a string")
        return text, data

    def _assemble(self, samples: list[Sample], records: dict[str, dict[str, Any]], spec: TaskSpec,
                  with_inputs: bool) -> tuple[list[Pair], dict[str, int]]:
        """Pairs in sample order (accepted outputs, duplicates removed; a structured output gives one
        pair per field its spec pairs) and the counts: sampled, accepted (of which ``accepted_unquoted``
        by rule 4 of the chat reply rule), rejected by reason (the spec's output rule: ``unclosed``,
        ``empty``, ``newline``, ``unparsed``), duplicates."""
        cfg = self.config
        output, opening = spec.output, opening_mark(spec)
        stats = {"sampled": 0, "accepted": 0, "accepted_unquoted": 0,
                 **{f"rejected_{r}": 0 for r in REJECTIONS}, "duplicates": 0}
        collect = PairCollector(output, with_inputs, cfg.remove_duplicates)
        for s in samples:
            raw = records[s.key]["text"]
            stats["sampled"] += 1
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
        return collect.pairs, stats


def _retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` header asks for (capped at a minute; 0 when absent or a date)."""
    try:
        return min(60.0, max(0.0, float(value))) if value else 0.0
    except ValueError:
        return 0.0
