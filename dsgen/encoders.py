"""A causal LM as a raw sentence encoder: the untrained encoder the papers' effects show on.

No raw BERT or RoBERTa ships in any installable package, so the raw pretrained encoder
available offline is one of the embedded causal LMs (its first layers), mean-pooled, built as
a sentence-transformers model::

    Transformer (the LM's first ``layers`` blocks + its final norm) -> Pooling -> Standardize

A spec names it in one string, usable wherever an encoder is asked for (``--encoder``, a
preset's ``[training] encoder``)::

    lm:<causal LM name>?layers=6&pooling=mean&token_norm=1&standardize=1&freeze_embeddings=1

and :data:`ENCODER_ALIASES` name the specs the presets use. Tables name an encoder by its alias
and the spec it resolves to (:func:`describe_encoder`).

Why these parts (measured on STS benchmark test, README "Encoders"): the hidden states of a
truncated LM are dominated by a few huge dimensions, so two random sentences have cosine ~0.9
and a cosine-regression loss barely moves them. ``standardize`` subtracts the mean and divides
by the standard deviation of each embedding dimension, with statistics of the first
:data:`STATS_SENTENCES` STS benchmark train sentences (the generation inputs' source; no labels
are used), fixed buffers that make cosines informative from the start. ``freeze_embeddings``
keeps the 49k x 576 token-embedding matrix out of AdamW (most of a step's time otherwise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dsgen.errors import DsgenError

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
    from dsgen.artifacts import stable_hash

    return {"stats": {"source": STATS_SOURCE, "sentences": stable_hash(stats_sentences())}}


_STATS: dict[str, Any] = {}  # statistics per (spec, base fingerprint, sentences) for this process


def build_encoder(spec: CausalEncoderSpec, device: str) -> Any:
    """The sentence-transformers model of a spec (weights from the LM's plain checkpoint)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from dsgen.models import lm_source

    source, _, local_only = lm_source(spec.base)
    config = {"num_hidden_layers": spec.layers} if spec.layers else {}
    try:
        # Text only: otherwise sentence-transformers wraps every sentence in an instruct model's chat template.
        transformer = Transformer(source, config_kwargs=config, model_kwargs={"dtype": torch.float32}, max_seq_length=128,
                                  processor_kwargs={"local_files_only": local_only},
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
        from dsgen.artifacts import stable_hash
        from dsgen.models import model_fingerprint

        key = stable_hash(model_fingerprint(spec.to_string()))  # spec, base weights and the statistics' sentences
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

T5_PREFIX = "t5:"


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

    from dsgen.models import encoder_path, hub_source

    path = encoder_path(name[len(T5_PREFIX):])
    local_only = hub_source(path, "encoder")[1] if not __import__("pathlib").Path(path).is_dir() else True
    try:
        module = T5FirstDecoderState(path, max_seq_length=max_seq_length,
                                     model_kwargs={"local_files_only": local_only},
                                     processor_kwargs={"local_files_only": local_only},
                                     config_kwargs={"local_files_only": local_only})
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load T5 encoder '{name}': {str(exc).splitlines()[0]}") from None
    return SentenceTransformer(modules=[module], device=device)
