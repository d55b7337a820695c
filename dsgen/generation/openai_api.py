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

**The endpoint** is asked through :class:`dsgen.endpoints.ApiClient`, as the ``api-judge`` asks it (settings:
:class:`dsgen.endpoints.EndpointConfig`). Every request and its answer are one file under ``<out>.requests/``
(:mod:`dsgen.endpoints.cache`): a rerun makes no network call, an interrupted run repeats no completed
request, and ``resume=False`` (``--fresh``) deletes the folder first. Requests are retried on 408, 409, 429,
5xx, timeouts and connection errors; 401, 403 and 404 stop the run in one line; any other refusal (a 4xx, an
answer that is not a completion) is cached as a rejected output (``rejected_refused`` in the sidecar's stats,
``refused_by`` per reason), and the run fails when more than ``max_failed_share`` of its requests were refused
(:mod:`dsgen.endpoints.client`). A credential in the base URL is used, and masked wherever the URL is stored or
shown, keys included (:mod:`dsgen.endpoints.urls`); the API key is read from the variable ``api_key_env``
names and never written anywhere.

Example:
    >>> gen = OpenAIGenerator(OpenAIConfig(model="gpt-4o-mini", mode="chat"))       # doctest: +SKIP
    >>> pairs = gen.generate(["A man plays a guitar."], Path("pairs.jsonl"))        # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from dsgen.artifacts import ensure_writable_dir, stable_hash
from dsgen.data.pairs import Pair, write_dataset
from dsgen.endpoints import MAX_FAILED_SHARE, MODES, TRANSPORT, ApiClient, EndpointConfig, RequestCache, Sample
from dsgen.errors import DsgenError
from dsgen.generation import GENERATORS
from dsgen.generation.base import GenerationContext, Generator, PairCollector
from dsgen.taskspec import FORMATS, OutputFormat, TaskSpec, load_task_spec

SELF_DEBIASING = "off: an OpenAI-compatible API gives no access to the counter-instruction rows"
REJECTIONS = ("unclosed", "empty", "newline", "unparsed", "refused")

CITATION = """@misc{openai-api,
  title = {{OpenAI} {API} Reference: Completions and Chat Completions},
  author = {{OpenAI}},
  howpublished = {\\url{https://platform.openai.com/docs/api-reference}},
  note = {Any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp, transformers serve); prompts and output
          rules of Schick and Sch{\\"u}tze (2021), without self-debiasing}
}"""


@dataclass
class OpenAIConfig(EndpointConfig):
    """Settings of the ``openai`` generator.

    Args:
        model / base_url / api_key_env / concurrency / max_retries / timeout / extra_body: the endpoint's
            (:class:`~dsgen.endpoints.EndpointConfig`). ``model`` is required (checked when a run starts).
            ``extra_body``: ``transformers serve`` samples only when asked with
            ``{"generation_config": "{\"do_sample\": true}"}`` (else it decodes greedily, whatever the
            temperature); vLLM and llama.cpp take ``top_k`` here. OpenAI's API refuses unknown fields.
        task: built-in task spec name or path to a DINO-format JSON spec.
        mode: ``completions`` (the instruction as a raw prompt) or ``chat`` (a user message; see the
            chat reply rule in the module docstring).
        per_label: samples per (x1, label), one request each.
        entries_per_label: x1 sentences per label for tasks without inputs.
        temperature / top_p / max_tokens: sampling settings sent with each request.
        max_failed_share: the run fails when more than this share of its requests are refused (a 4xx
            other than 401/403/404, an answer that is not a completion); :data:`~dsgen.endpoints.MAX_FAILED_SHARE`
            says why 0.05.
        allow_newlines / keep_unclosed: output rules (DINO: both off).
        remove_duplicates: drop repeated (x1, x2, y).
        chunk_inputs: inputs whose requests are queued together (bounds the queue; an interrupted run
            has finished the inputs in order).
        seed: run seed; each request's ``seed`` is derived from it, the prompt and the sample index.
    """

    task: str = "sts-x2"
    mode: str = "completions"
    per_label: int = 5
    entries_per_label: int = 100
    temperature: float = 1.0
    top_p: float = 0.9
    max_tokens: int = 40
    max_failed_share: float = MAX_FAILED_SHARE
    allow_newlines: bool = False
    keep_unclosed: bool = False
    remove_duplicates: bool = True
    chunk_inputs: int = 32
    seed: int = 42

    who: ClassVar[str] = "openai generator"
    field_order: ClassVar[tuple[str, ...]] = (
        "model", "base_url", "api_key_env", "task", "mode", "per_label", "entries_per_label", "temperature", "top_p",
        "max_tokens", "concurrency", "max_retries", "timeout", "max_failed_share", "allow_newlines", "keep_unclosed",
        "remove_duplicates", "chunk_inputs", "seed", "extra_body")

    def check(self) -> "OpenAIConfig":
        """One-line errors for settings no run can use (the model is checked when a run starts)."""
        if self.mode not in MODES:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("openai generator mode", self.mode, list(MODES)))
        self.check_url()
        for name in ("per_label", "entries_per_label", "max_tokens", "concurrency", "chunk_inputs"):
            if getattr(self, name) < 1:
                raise DsgenError(f"openai generator setting {name} must be at least 1 (got {getattr(self, name)})")
        if self.max_retries < 0:
            raise DsgenError(f"openai generator setting max_retries must be at least 0 (got {self.max_retries})")
        if self.timeout <= 0:
            raise DsgenError(f"openai generator setting timeout must be positive (got {self.timeout})")
        if not 0 <= self.max_failed_share <= 1:
            raise DsgenError(f"openai generator setting max_failed_share must be in [0, 1] (got {self.max_failed_share})")
        self.check_body()
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
        if core.debiased and any(spec.counter_labels.values()):
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
        return ApiClient.from_config(cfg, mode=cfg.mode, max_failed_share=cfg.max_failed_share,
                                     share_setting="[generation.openai] max_failed_share")

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
        write_dataset(out, pairs, kind="generated-pairs", generator_name=self.name, config=cfg.to_dict(),
                      task_spec=spec.to_dict(), dataset_key=key,
                      generator={"api": self.base_url, "model": cfg.model, "endpoint": self.endpoint,
                                 "served_models": served},
                      seed=cfg.seed, n_inputs=len(inputs) if inputs is not None else None, n_pairs=len(pairs),
                      stats=stats, self_debiasing=SELF_DEBIASING, request_cache=cache.folder.name,
                      timings={"generate_seconds": round(time.perf_counter() - started, 2)})
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

