"""DINO's dataset generator (Schick & Schütze, 2021) on the batched self-debiasing core.

For every input x1 and label y it asks for ``per_label`` continuations of the instruction
I_y(x1), debiased against the instructions of CL(y). Without inputs (``sts-x1``) it makes
``entries_per_label`` x1 sentences per label from scratch, with top-p only.

Work is cut into chunks of ``chunk_inputs`` inputs; each chunk is decoded with its own seed
(derived from the run seed and the chunk number) and written atomically to
``<out>.partial/`` when done. Running the same command again after a crash continues from
the last completed chunk and ends with the same file as an uninterrupted run.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import read_json, read_jsonl, stable_hash, write_json, write_jsonl, write_sidecar
from dsgen.config import Config
from dsgen.data.pairs import Pair, parse_label, write_pairs
from dsgen.generation import GENERATORS
from dsgen.generation.base import Generator
from dsgen.generation.decoding import DebiasedDecoder, DecodeRequest, SamplingConfig
from dsgen.taskspec import TaskSpec, load_task_spec


@dataclass
class GenerationConfig(Config):
    """Settings of a generation run; defaults are DINO's.

    Args:
        task: built-in task spec name or path to a DINO-format JSON spec.
        generator: causal LM alias, HF id, local directory or ``.gguf`` file.
        per_label: continuations per (x1, label).
        max_attempts: tries per (x1, label); each try samples the continuations still missing.
        entries_per_label: x1 sentences per label for tasks without inputs.
        counter_labels: apply self-debiasing against the spec's counter labels.
        sampling: decoding settings (:class:`SamplingConfig`).
        top_k_without_inputs: top-k used instead of ``sampling.top_k`` for tasks without
            inputs (DINO: top-p only, for diversity of x1).
        allow_newlines / keep_unclosed: output rules (DINO: both off).
        remove_duplicates: drop repeated (x1, x2, y).
        batch_size: most sequences decoded together (main + counter rows).
        chunk_inputs: inputs per resumable chunk.
        device / dtype: where and in which precision the LM runs.
        seed: run seed.
    """

    task: str = "sts-x2"
    generator: str = "smollm2-135m"
    per_label: int = 2
    max_attempts: int = 5
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
    dtype: str = "auto"
    seed: int = 42


def dataset_key(cfg: GenerationConfig, inputs: list[str] | None, spec: TaskSpec | None = None) -> str:
    """Hash of everything that determines a generated dataset (the cache key)."""
    spec_dict = (spec or load_task_spec(cfg.task)).to_dict()
    return stable_hash({"config": cfg.to_dict(), "spec": spec_dict, "inputs": inputs})


@GENERATORS.register("debiased")
class DebiasedGenerator(Generator):
    """The :class:`Generator` of DINO and of GenSE-style generation: one core, different specs.

    Example:
        >>> gen = DebiasedGenerator(GenerationConfig(task="sts-x2"))           # doctest: +SKIP
        >>> pairs = gen.generate(["A man plays a guitar."], Path("pairs.jsonl"))  # doctest: +SKIP
    """

    name = "debiased"

    def __init__(self, config: GenerationConfig | None = None, lm: Any = None) -> None:
        self.config = config or GenerationConfig()
        self._lm = lm  # a dsgen.models.LoadedLM, loaded on first use when not given

    def get_config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def spec(self, with_inputs: bool | None = None) -> TaskSpec:
        spec = load_task_spec(self.config.task, with_inputs=with_inputs)
        return spec if self.config.counter_labels else spec.without_counter_labels()

    @property
    def lm(self) -> Any:
        if self._lm is None:
            from dsgen.models import load_causal_lm

            self._lm = load_causal_lm(self.config.generator, self.config.device, self.config.dtype)
        return self._lm

    # -- planning -------------------------------------------------------------------------
    def plan(self, spec: TaskSpec, inputs: list[str] | None) -> list[list[tuple[str | None, str, DecodeRequest]]]:
        """Chunks of (x1, label, request), input-major so one chunk shares its prompts."""
        cfg = self.config
        if inputs is not None:
            units: list[list[tuple[str | None, str, DecodeRequest]]] = [
                [(x1, label, DecodeRequest(spec.prompt(label, x1), tuple(spec.prompt(c, x1) for c in spec.counter_labels[label]),
                                           cfg.per_label, cfg.max_attempts)) for label in spec.labels]
                for x1 in inputs]
        else:
            units = [[(None, label, DecodeRequest(spec.prompt(label, None),
                                                  tuple(spec.prompt(c, None) for c in spec.counter_labels[label]),
                                                  1, cfg.max_attempts)) for label in spec.labels]
                     for _ in range(cfg.entries_per_label)]
        return [[req for unit in units[i:i + cfg.chunk_inputs] for req in unit]
                for i in range(0, len(units), cfg.chunk_inputs)]

    def sampling(self, spec: TaskSpec) -> SamplingConfig:
        if spec.needs_inputs:
            return self.config.sampling
        return self.config.sampling.replace(top_k=self.config.top_k_without_inputs)

    # -- running -------------------------------------------------------------------------
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True) -> list[Pair]:
        from dsgen.progress import progress_bar

        cfg = self.config
        out = Path(out)
        spec = self.spec(with_inputs=inputs is not None)
        chunks = self.plan(spec, inputs)
        key = dataset_key(cfg, inputs, spec)
        partial = out.with_name(out.name + ".partial")
        state_file = partial / "state.json"
        if partial.exists() and (not state_file.exists() or read_json(state_file).get("key") != key):
            shutil.rmtree(partial)  # left by a run with other settings: it cannot be continued
        partial.mkdir(parents=True, exist_ok=True)
        write_json(state_file, {"key": key, "chunks": len(chunks)})

        done = {int(p.stem.split("-")[1]) for p in partial.glob("chunk-*.jsonl")}
        started = time.perf_counter()
        stats = {"sampled": 0, "accepted": 0, "tokens": 0, "resumed_chunks": len(done)}
        target = sum(r.n for chunk in chunks for _, _, r in chunk)
        decoder = None
        with progress_bar(f"generate {spec.name}", total=target, enabled=progress) as advance:
            for ci in sorted(done):
                advance(sum(r.n for _, _, r in chunks[ci]))
            for ci, chunk in enumerate(chunks):
                if ci in done:
                    continue
                if decoder is None:
                    decoder = DebiasedDecoder(self.lm.model, self.lm.tokenizer, self.sampling(spec), cfg.batch_size,
                                              cfg.allow_newlines, cfg.keep_unclosed)

                def on_done(o: Any) -> None:
                    if o.accepted:
                        advance(1)

                results = decoder.decode([r for _, _, r in chunk], seed=int(stable_hash([cfg.seed, ci]), 16) % 2**63,
                                         on_group_done=on_done)
                rows = []
                for (x1, label, req), outs in zip(chunk, results):
                    missing = req.n - sum(o.accepted for o in outs)
                    if missing > 0:
                        advance(missing)  # the bar counts targets; unfilled ones are done too
                    for o in outs:
                        rows.append({"x1": x1, "label": label, "text": o.text, "accepted": o.accepted,
                                     "attempt": o.attempt, "n_tokens": o.n_tokens})
                write_jsonl(partial / f"chunk-{ci:05d}.jsonl", rows)
                if os.environ.get("DSGEN_TEST_KILL_AFTER_CHUNK") == str(ci):  # crash injection for the resume test
                    os.kill(os.getpid(), signal.SIGKILL)

        pairs: list[Pair] = []
        seen: set[tuple] = set()
        for ci in range(len(chunks)):
            for row in read_jsonl(partial / f"chunk-{ci:05d}.jsonl"):
                stats["sampled"] += 1
                stats["tokens"] += row["n_tokens"]
                if not row["accepted"]:
                    continue
                stats["accepted"] += 1
                if inputs is not None:
                    pair = Pair(row["x1"], row["text"], parse_label(row["label"]), extra={"attempt": row["attempt"]})
                else:
                    pair = Pair(row["text"], None, parse_label(row["label"]), extra={"attempt": row["attempt"]})
                if cfg.remove_duplicates:
                    if pair.key() in seen:
                        continue
                    seen.add(pair.key())
                pairs.append(pair)
        elapsed = time.perf_counter() - started
        write_pairs(out, pairs)
        write_sidecar(out, kind="generated-pairs", config=cfg.to_dict(), task_spec=spec.to_dict(), dataset_key=key,
                      generator=self.lm.describe() if (self._lm is not None) else {"name": cfg.generator},
                      seed=cfg.seed, n_inputs=len(inputs) if inputs is not None else None, n_pairs=len(pairs),
                      stats=stats, timings={"generate_seconds": round(elapsed, 2)})
        shutil.rmtree(partial, ignore_errors=True)
        return pairs
