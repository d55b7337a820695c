"""A causal LM as a raw sentence encoder: the untrained encoder the papers' effects show on.

No raw BERT or RoBERTa ships in any installable package, so the raw pretrained encoder
available offline is one of the embedded causal LMs (its first layers), mean-pooled, built as
a sentence-transformers model::

    Transformer (the LM's first ``layers`` blocks + its final norm) -> Pooling -> Standardize

A spec names it in one string, usable wherever an encoder is asked for (``--encoder``, a
preset's ``[training] encoder``)::

    lm:<causal LM name>?layers=6&pooling=mean&token_norm=1&standardize=1&freeze_embeddings=1

and :data:`dsgen.models.ENCODER_ALIASES` name the specs the presets use (the specs are parsed in
:mod:`dsgen.models`, beside the generator aliases). Tables name an encoder by its alias
and the spec it resolves to (:func:`dsgen.models.describe_encoder`).

Why these parts (measured on STS benchmark test, README "Encoders"): the hidden states of a
truncated LM are dominated by a few huge dimensions, so two random sentences have cosine ~0.9
and a cosine-regression loss barely moves them. ``standardize`` subtracts the mean and divides
by the standard deviation of each embedding dimension, with statistics of the first
:data:`STATS_SENTENCES` STS benchmark train sentences (the generation inputs' source; no labels
are used), fixed buffers that make cosines informative from the start. ``freeze_embeddings``
keeps the 49k x 576 token-embedding matrix out of AdamW (most of a step's time otherwise).
"""

from __future__ import annotations

from typing import Any

from dsgen.errors import DsgenError
from dsgen.models import (T5_PREFIX, CausalEncoderSpec, encoder_path, hub_revision, lm_source, model_fingerprint,
                          parse_encoder_spec, resolve_device, stats_sentences)

_STATS: dict[str, Any] = {}  # statistics per (spec, base fingerprint, sentences) for this process


def build_encoder(spec: CausalEncoderSpec, device: str) -> Any:
    """The sentence-transformers model of a spec (weights from the LM's plain checkpoint)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    source, _, local_only, revision = lm_source(spec.base)
    config = {"num_hidden_layers": spec.layers, "revision": revision} if spec.layers else {"revision": revision}
    try:
        # Text only: otherwise sentence-transformers wraps every sentence in an instruct model's chat template.
        transformer = Transformer(source, config_kwargs=config, model_kwargs={"dtype": torch.float32, "revision": revision},
                                  max_seq_length=128,
                                  processor_kwargs={"local_files_only": local_only, "revision": revision},
                                  modality_config={"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
                                  module_output_name="token_embeddings")
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load encoder base '{spec.base}': {str(exc).splitlines()[0]}") from None
    tok = transformer.tokenizer
    tok.padding_side = "right"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not spec.token_norm:
        transformer.model.norm = torch.nn.Identity()
    if spec.freeze_embeddings:
        transformer.model.get_input_embeddings().weight.requires_grad_(False)
    dim = transformer.model.config.hidden_size
    pooling = {"mean": Pooling(dim, pooling_mode="mean"), "last": Pooling(dim, pooling_mode="lasttoken"),
               "mean-skip-first": SkipFirstMeanPooling()}[spec.pooling]
    model = SentenceTransformer(modules=[transformer, pooling], device=device)
    if spec.standardize:
        from dsgen.identity import model_key

        key = model_key(model_fingerprint(spec.to_string()))  # spec, base weights and the statistics' sentences
        if key not in _STATS:
            with torch.inference_mode():
                emb = model.encode(stats_sentences(), batch_size=64, convert_to_tensor=True).float().cpu()
            _STATS[key] = (emb.mean(0), emb.std(0) + 1e-6)
        mean, std = _STATS[key]
        model.append(Standardize(mean, std).to(device))
    return model


def _module_base() -> type:
    from sentence_transformers.base.modules.module import Module

    return Module


class Standardize(_module_base()):  # type: ignore[misc]
    """``(x - mean) / std`` per dimension of the sentence embedding, with fixed statistics (buffers)."""

    config_keys: list[str] = ["dim"]

    def __init__(self, mean: Any = None, std: Any = None, dim: int | None = None) -> None:
        import torch

        super().__init__()
        self.dim = int(dim if dim is not None else mean.shape[0])
        self.register_buffer("mean", mean.clone() if mean is not None else torch.zeros(self.dim))
        self.register_buffer("std", std.clone() if std is not None else torch.ones(self.dim))

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        features["sentence_embedding"] = (features["sentence_embedding"] - self.mean) / self.std
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str = "", **kwargs: Any) -> "Standardize":
        hub = {k: v for k, v in kwargs.items() if k in ("subfolder", "token", "cache_folder", "revision", "local_files_only")}
        config = cls.load_config(model_name_or_path=model_name_or_path, **hub)
        return cls.load_torch_weights(model_name_or_path=model_name_or_path, model=cls(dim=config["dim"]), **hub)


class SkipFirstMeanPooling(_module_base()):  # type: ignore[misc]
    """Mean over the real tokens of each sentence except its first position (right padding)."""

    config_keys: list[str] = []

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        tokens, mask = features["token_embeddings"], features["attention_mask"].unsqueeze(-1).to(
            features["token_embeddings"].dtype).clone()
        if mask.shape[1] > 1:
            mask[:, :1] = 0
        features["sentence_embedding"] = (tokens * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return features

    def save(self, output_path: str, *args: Any, **kwargs: Any) -> None:
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str = "", **kwargs: Any) -> "SkipFirstMeanPooling":
        return cls()


# -- GenSE's encoder: a T5 encoder-decoder, the sentence embedding its first decoder state -------------------


def _transformer_base() -> type:
    from sentence_transformers.base.modules.transformer import Transformer

    return Transformer


class T5FirstDecoderState(_transformer_base()):  # type: ignore[misc]
    """A T5 encoder-decoder as a sentence encoder, as GenSE embeds a sentence: the encoder reads the
    sentence and the decoder's output state at its first position (fed only the decoder start token)
    is the embedding (GenSE's ``modeling_t5.py``: the first decoder output of ``T5ForConditionalGeneration``
    without its LM head). sentence-transformers' own ``Transformer`` keeps only T5's encoder, so this
    subclass loads the whole ``T5Model`` and runs the decoder one step; tokenising, saving and loading are
    the library's. A folder saved with it names this class: load it with ``trust_remote_code=True``.
    """

    def _load_encoder_only_model(self, model_name_or_path: str, config: Any, **model_kwargs: Any) -> Any:
        from transformers import T5Config, T5Model

        if isinstance(config, T5Config):
            return T5Model.from_pretrained(model_name_or_path, config=config, **model_kwargs)
        return super()._load_encoder_only_model(model_name_or_path, config, **model_kwargs)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        import torch

        ids = features["input_ids"]
        start = torch.full((ids.shape[0], 1), int(self.model.config.decoder_start_token_id or 0), dtype=ids.dtype,
                           device=ids.device)
        out = self.model(input_ids=ids, attention_mask=features.get("attention_mask"), decoder_input_ids=start,
                         return_dict=True)
        features["sentence_embedding"] = out.last_hidden_state[:, 0]
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.model.config.d_model)


def build_t5_encoder(name: str, device: str, max_seq_length: int = 64) -> Any:
    """``t5:<model id or directory>``: GenSE's sentence encoder (inputs cut at 64 tokens, GenSE's ``train.sh``)."""
    from sentence_transformers import SentenceTransformer

    path = encoder_path(name[len(T5_PREFIX):])
    revision, local_only = (None, True) if __import__("pathlib").Path(path).is_dir() else hub_revision(path, "encoder")
    pinned = {"local_files_only": local_only, "revision": revision}
    try:
        module = T5FirstDecoderState(path, max_seq_length=max_seq_length, model_kwargs=pinned, processor_kwargs=pinned,
                                     config_kwargs=pinned)
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load T5 encoder '{name}': {str(exc).splitlines()[0]}") from None
    return SentenceTransformer(modules=[module], device=device)


# -- loading any encoder by name --------------------------------------------------------------------


def dsgen_modules_only(folder: Any) -> bool:
    """Whether a sentence-transformers folder names only the library's and dsgen's own module classes (a model dsgen
    saved: a causal-LM slice with :class:`Standardize`, a run's kept model, a SimCSE guide) and ships no code of its
    own: such a folder may be loaded with ``trust_remote_code=True`` (recent sentence-transformers refuse a module
    class outside the library without it), since every class it names is installed code."""
    import json
    from pathlib import Path

    folder = Path(folder)
    modules = folder / "modules.json"
    if not folder.is_dir() or not modules.is_file() or any(folder.rglob("*.py")):
        return False
    try:
        types = [m.get("type", "") for m in json.loads(modules.read_text(encoding="utf-8"))]
        for config in folder.rglob("*config*.json"):  # config.json, tokenizer_config.json, a module's own, ...
            if _names_code(json.loads(config.read_text(encoding="utf-8"))):
                return False  # the model's own code, possibly from the Hub
    except (OSError, ValueError, AttributeError, TypeError):
        return False
    return all(t.startswith(("sentence_transformers.", "dsgen.")) for t in types)


def _names_code(config: Any) -> bool:
    """Whether a config names code to import: an ``auto_map`` at any depth (a nested text or vision config too)."""
    if isinstance(config, dict):
        return "auto_map" in config or any(_names_code(v) for v in config.values())
    return isinstance(config, list) and any(_names_code(v) for v in config)


def load_saved(folder: Any, device: str, **kwargs: Any) -> Any:
    """A ``SentenceTransformer`` from a folder or id; a folder of dsgen's own modules (:func:`dsgen_modules_only`)
    loaded with them."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device=device, trust_remote_code=dsgen_modules_only(folder), **kwargs)


def load_encoder(name: str = "minilm-l6", device: str = "auto", seed: int | None = None) -> Any:
    """A ``SentenceTransformer``: an alias, a causal-LM encoder spec (:mod:`dsgen.encoders`), or an
    HF / sentence-transformers id or directory (a plain transformer gets mean pooling).

    ``seed`` seeds any freshly initialised part (a new head or projection) without touching the
    global random state, so the result does not depend on what ran before.
    """
    from pathlib import Path

    from dsgen.seeding import seeded

    device = resolve_device(device)
    spec = parse_encoder_spec(name)
    with seeded(seed):
        if spec is not None:
            return build_encoder(spec, device)
        if name.startswith(T5_PREFIX):
            return build_t5_encoder(name, device)
        path = encoder_path(name)
        revision, local_only = (None, True) if Path(path).is_dir() else hub_revision(path, "encoder")
        from safetensors import SafetensorError

        try:
            return load_saved(path, device, local_files_only=local_only, revision=revision)
        except (OSError, ValueError) as exc:
            raise DsgenError(f"cannot load encoder '{name}': {str(exc).splitlines()[0]}") from None
        except (SafetensorError, RuntimeError, EOFError) as exc:  # a truncated or damaged weights file
            raise DsgenError(f"cannot load encoder '{name}': its weights are damaged or unreadable "
                             f"({(str(exc).splitlines() or [type(exc).__name__])[0]}); save or download the folder again") from None
