"""DINO's dataset generator (Schick & Schütze, 2021) on the batched self-debiasing core.

For every input x1 and label y it draws ``per_label`` continuations of the instruction I_y(x1)
at once, debiased against the instructions of CL(y), and keeps those that pass DINO's output
rules; as in DINO's code there is no retry (``max_attempts`` 1), and postprocessing later
keeps at most two x2 per (x1, y). Without inputs (``sts-x1``) it makes ``entries_per_label``
x1 sentences per label from scratch, with top-p only.

Work is cut into chunks (:mod:`dsgen.generation.chunks`), each decoded with its own seed by a
backend (:mod:`dsgen.generation.backends`) and written atomically to ``<out>.partial/``.
Running the same command again after a crash continues from the last completed chunk and
ends with the same file as an uninterrupted run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen import citations
from dsgen.artifacts import ensure_writable_dir
from dsgen.config import Config
from dsgen.data.pairs import Pair, write_dataset
from dsgen.errors import DsgenError
from dsgen.generation import GENERATORS
from dsgen.generation.base import GenerationContext, Generator, PairCollector
from dsgen.generation.chunks import Chunk, ChunkItem, ChunkStore, chunk_seed
from dsgen.generation.outputs import DecodeRequest
from dsgen.generation.sampling import SamplingConfig
from dsgen.taskspec import TaskSpec, load_task_spec


@dataclass
class GenerationConfig(Config):
    """Settings of a generation run; defaults are DINO's.

    Args:
        task: built-in task spec name or path to a DINO-format JSON spec.
        generator: causal LM alias, HF id, local directory or ``.gguf`` file.
        per_label: continuations drawn per (x1, label) in one go (DINO's
            ``--num_entries_per_input_and_label``; 5 as in RISE's reproduction script and DINO's
            "a maximum of five tries"); postprocessing keeps at most 2.
        max_attempts: tries per (x1, label); DINO makes one. With more, each further try samples
            the outputs still missing (an option, not DINO's setting).
        entries_per_label: x1 sentences per label for tasks without inputs.
        counter_labels: apply self-debiasing against the spec's counter labels (with a decay constant above 0).
        sampling: decoding settings (:class:`SamplingConfig`).
        top_k_without_inputs: top-k used instead of ``sampling.top_k`` for tasks without
            inputs (DINO: top-p only, for diversity of x1).
        allow_newlines / keep_unclosed: output rules (DINO: both off).
        remove_duplicates: drop repeated (x1, x2, y) (DINO's ``--remove_duplicates``).
        batch_size: most sequences decoded together (main + counter rows).
        chunk_inputs: inputs per resumable chunk.
        device / dtype: where and in which precision the LM runs (float32 as DINO).
        seed: run seed.
    """

    task: str = "sts-x2"
    generator: str = "smollm2-135m"
    per_label: int = 5
    max_attempts: int = 1
    entries_per_label: int = 100
    counter_labels: bool = True
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    top_k_without_inputs: int = 0
    allow_newlines: bool = False
    keep_unclosed: bool = False
    remove_duplicates: bool = True
    batch_size: int = 128
    chunk_inputs: int = 32
    device: str = "auto"
    dtype: str = "float32"
    seed: int = 42

    @property
    def debiased(self) -> bool:
        """Whether decoding debiases against the spec's counter labels: asked for (``counter_labels``) and with a
        decay constant above 0 (at 0 the sampler never reads the counter rows:
        :meth:`~dsgen.generation.sampling.TokenSampler.debiased`)."""
        return self.counter_labels and self.sampling.decay_constant > 0

    def check(self) -> "GenerationConfig":
        """One-line errors for settings no run can use (checked before anything is loaded)."""
        from dsgen.models import check_device, check_dtype

        for name in ("per_label", "max_attempts", "entries_per_label", "batch_size", "chunk_inputs"):
            if getattr(self, name) < 1:
                raise DsgenError(f"generation setting {name} must be at least 1 (got {getattr(self, name)})")
        s = self.sampling
        if s.max_new_tokens < 1:
            raise DsgenError(f"max_new_tokens must be at least 1 (got {s.max_new_tokens})")
        if not 0 < s.top_p <= 1:
            raise DsgenError(f"top_p must be in (0, 1] (got {s.top_p})")
        if s.top_k < 0 or s.decay_constant < 0 or not 0 < s.epsilon <= 1 or s.temperature <= 0:
            raise DsgenError("top_k and the decay constant must be non-negative, epsilon in (0, 1] and the temperature "
                             "positive")
        check_device(self.device)
        check_dtype(self.dtype)
        return self


@GENERATORS.register("debiased")
class DebiasedGenerator(Generator):
    """The :class:`Generator` of DINO and of GenSE-style generation: one core, different specs.

    Example:
        >>> gen = DebiasedGenerator(GenerationConfig(task="sts-x2"))           # doctest: +SKIP
        >>> pairs = gen.generate(["A man plays a guitar."], Path("pairs.jsonl"))  # doctest: +SKIP
    """


    config_class = GenerationConfig
    citation = citations.DINO + "\n\n" + citations.SELF_DEBIASING
    version = 5  # 2: rejected outputs recorded with their reason in the chunk files; structured outputs; 3: oneDNN's
    # linear layers where the machine's probe finds them batch-invariant (other bits than MKL's); 4: GPT-2's Conv1D
    # layers by oneDNN's too (other bits for GPT-2 models only); 5: the sampler's debiased weights not divided by their
    # sum over the vocabulary before top-k renormalises them (the same probabilities, other last bits, which no longer
    # depend on the other groups or the thread count)
    supports_debiasing = True

    def __init__(self, config: GenerationConfig | None = None, lm: Any = None, backend: Any = None,
                 load_lm: Any = None) -> None:
        self.config = (config or GenerationConfig()).check()
        self._lm = lm  # a dsgen.models.LoadedLM, loaded on first use when not given
        self._load_lm = load_lm  # how to load it (default: dsgen.models.load_causal_lm)
        self.backend = backend  # a dsgen.generation.backends.Backend; default: local, in this process

    @classmethod
    def build(cls, config: GenerationConfig, context: GenerationContext) -> "DebiasedGenerator":
        return cls(config, backend=context.backend,
                   load_lm=lambda: context.lm(config.generator, config.device, config.dtype))

    def needs_inputs(self) -> bool:
        return load_task_spec(self.config.task).needs_inputs

    def spec(self, with_inputs: bool | None = None) -> TaskSpec:
        """The task's spec as this run decodes it: without counter labels where nothing is debiased against them
        (:attr:`GenerationConfig.debiased`). So a decay-0 run forwards no counter rows, most of a debiased step's
        rows; its dataset's key and sidecar name the spec it decoded with."""
        spec = load_task_spec(self.config.task, with_inputs=with_inputs)
        return spec if self.config.debiased else spec.without_counter_labels()

    def dataset_key(self, inputs: list[str] | None) -> str:
        from dsgen.identity import dataset_key, texts_key
        from dsgen.models import model_fingerprint

        spec = self.spec(with_inputs=inputs is not None)
        model = self._lm.fingerprint() if self._lm is not None else model_fingerprint(self.config.generator)
        return dataset_key(self.name, self.version, self.get_config_dict(), texts_key(inputs), spec.to_dict(), model)

    @property
    def lm(self) -> Any:
        if self._lm is None:
            from dsgen.models import load_causal_lm

            cfg = self.config
            self._lm = self._load_lm() if self._load_lm else load_causal_lm(cfg.generator, cfg.device, cfg.dtype)
        return self._lm

    @property
    def tokenizer(self) -> Any:
        """The LM's tokenizer: the loaded model's, or (workers decode elsewhere) loaded alone."""
        from dsgen.generation.backends import LocalBackend

        if self._lm is not None or self.backend is None or isinstance(self.backend, LocalBackend):
            return self.lm.tokenizer
        from dsgen.models import load_tokenizer

        return load_tokenizer(self.config.generator)

    # -- planning -------------------------------------------------------------------------
    def chunks(self, spec: TaskSpec, inputs: list[str] | None) -> list[Chunk]:
        """Chunks of (x1, label, request), input-major so one chunk shares its prompts."""
        cfg = self.config

        tok = self.tokenizer if spec.chat else None  # a chat spec renders through the tokenizer's template

        def item(x1: str | None, label: str, n: int) -> ChunkItem:
            counters = tuple(spec.prompt(c, x1, tok) for c in spec.counter_labels[label])
            return ChunkItem(x1, label, DecodeRequest(spec.prompt(label, x1, tok), counters, n, cfg.max_attempts))

        if inputs is not None:
            units = [[item(x1, label, cfg.per_label) for label in spec.labels] for x1 in inputs]
        else:
            units = [[item(None, label, 1) for label in spec.labels] for _ in range(cfg.entries_per_label)]
        starts = range(0, len(units), cfg.chunk_inputs)
        return [Chunk(ci, chunk_seed(cfg.seed, ci), tuple(i for unit in units[s:s + cfg.chunk_inputs] for i in unit))
                for ci, s in enumerate(starts)]

    def sampling(self, spec: TaskSpec) -> SamplingConfig:
        """The task's decoding settings: x1 from scratch with ``top_k_without_inputs``; a structured answer
        may end with the model's end of turn (DINO's quoted outputs never sample it)."""
        sampling = self.config.sampling
        if not spec.needs_inputs:
            sampling = sampling.replace(top_k=self.config.top_k_without_inputs)
        if spec.output.structured:
            sampling = sampling.replace(suppress_eos=False)
        return sampling

    def decoder_spec(self, spec: TaskSpec) -> Any:
        from dsgen.generation.backends import DecoderSpec

        cfg = self.config
        return DecoderSpec(cfg.generator, cfg.device, cfg.dtype, self.sampling(spec), cfg.batch_size, spec.output,
                           cfg.allow_newlines, cfg.keep_unclosed)

    # -- running -------------------------------------------------------------------------
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True, resume: bool = True) -> list[Pair]:
        from dsgen.generation.backends import LocalBackend
        from dsgen.progress import progress_bar

        cfg = self.config
        out = Path(out)
        spec = self.spec(with_inputs=inputs is not None)
        chunks = self.chunks(spec, inputs)
        key = self.dataset_key(inputs)
        backend = self.backend or LocalBackend()
        if isinstance(backend, LocalBackend):
            if backend.lm is None:
                backend.lm = self.lm  # load (and fail on a bad model or device) before anything is written
        else:
            from dsgen.models import check_lm_name

            check_lm_name(cfg.generator)  # the workers load it; fail here, before anything is written
        ensure_writable_dir(out.parent)
        store = ChunkStore(out)
        done = store.open(key, len(chunks), resume)
        started = time.perf_counter()
        todo = [c for c in chunks if c.index not in done]
        timings: list[dict[str, Any]] = []

        def on_done(chunk: Chunk, rows: list[dict[str, Any]], timing: dict[str, Any]) -> None:
            store.write(chunk.index, rows)
            timings.append({"chunk": chunk.index, **timing})

        with progress_bar(f"generate {spec.name}", total=sum(c.target for c in chunks), enabled=progress) as advance:
            advance(sum(c.target for c in chunks if c.index in done))
            report = backend.run(self.decoder_spec(spec), todo, on_done, advance)

        pairs, stats = self._assemble(store, chunks, inputs is not None, spec)
        stats["resumed_chunks"] = len(done)
        if self._lm is not None:
            lm = self._lm.describe()
        else:  # decoded by workers (Ray): the model is named and fingerprinted, not loaded here
            from dsgen.models import model_fingerprint

            lm = {"name": cfg.generator, "fingerprint": model_fingerprint(cfg.generator)}
        write_dataset(out, pairs, kind="generated-pairs", generator_name=self.name, config=cfg.to_dict(),
                      task_spec=spec.to_dict(), dataset_key=key, generator=lm, seed=cfg.seed,
                      n_inputs=len(inputs) if inputs is not None else None, n_pairs=len(pairs), stats=stats,
                      backend={**report.to_dict(), "chunks": sorted(timings, key=lambda t: t["chunk"])},
                      numerics=sorted({t["numerics"] for t in timings if "numerics" in t}),
                      timings={"generate_seconds": round(time.perf_counter() - started, 2)})
        store.remove()
        return pairs

    def _assemble(self, store: ChunkStore, chunks: list[Chunk], with_inputs: bool,
                  spec: TaskSpec | None = None) -> tuple[list[Pair], dict[str, int]]:
        """Pairs from the chunk files in chunk order (accepted outputs, duplicates removed; a structured
        output gives one pair per field its spec pairs), and the counts: sampled, accepted, tokens, and the
        rejected outputs by reason (``rejected_unclosed``: no end mark; ``rejected_empty``;
        ``rejected_newline``; ``rejected_unparsed``: a structured output without all its fields)."""
        stats = {"sampled": 0, "accepted": 0, "tokens": 0, "rejected_unclosed": 0, "rejected_empty": 0,
                 "rejected_newline": 0, "rejected_unparsed": 0, "duplicates": 0}
        collect = PairCollector(spec.output if spec is not None else None, with_inputs, self.config.remove_duplicates)
        for chunk in chunks:
            for row in store.read(chunk.index):
                stats["sampled"] += 1
                stats["tokens"] += row["n_tokens"]
                if not row["accepted"]:
                    stats[f"rejected_{row['rejected']}"] += 1
                    continue
                stats["accepted"] += 1
                collect.add(row["x1"], row["label"], row["text"], {"attempt": row["attempt"]})
        stats["duplicates"] = collect.duplicates
        return collect.pairs, stats
