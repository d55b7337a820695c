"""A causal LM as a raw sentence encoder: the untrained encoder the papers' effects show on.

No raw BERT or RoBERTa ships in any installable package, so the raw pretrained encoder
available offline is one of the embedded causal LMs (optionally only its first layers) with
mean pooling, built as a sentence-transformers model:

    Transformer (the LM's first ``layers`` blocks) -> [final norm per token] -> Pooling -> [standardise]

A spec names it in one string, usable wherever an encoder is asked for (``--encoder``, a
preset's ``[training] encoder``)::

    lm:<causal LM name>?layers=6&pooling=mean&token_norm=1&freeze_embeddings=1

and aliases (:data:`ENCODER_ALIASES`) name the specs dsgen's presets use. Tables name an
encoder by its alias and show the spec it resolves to (:func:`describe_encoder`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dsgen.errors import DsgenError

PREFIX = "lm:"
POOLINGS = ("mean", "mean-skip-first", "last")

# alias -> spec (see the README's "Encoders" section for how these were chosen)
ENCODER_ALIASES: dict[str, str] = {
    "smollm2-l6": "lm:smollm2-135m?layers=6&pooling=mean&token_norm=1&freeze_embeddings=1",
}


@dataclass(frozen=True)
class CausalEncoderSpec:
    """A causal LM used as a sentence encoder.

    Args:
        base: the LM (alias, ``.gguf`` file, directory or Hub id), as for generators.
        layers: keep only its first ``layers`` transformer blocks (0: all).
        pooling: ``mean`` over tokens, ``mean-skip-first`` (the first position is an attention
            sink in causal LMs and carries huge activations), or ``last`` token.
        token_norm: apply the LM's own final normalisation to every token state before pooling
            (a truncated LM's hidden states are otherwise dominated by a few huge dimensions).
        freeze_embeddings: keep the token-embedding matrix fixed in training (49k-262k rows that
            AdamW would otherwise update every step).
    """

    base: str
    layers: int = 0
    pooling: str = "mean"
    token_norm: bool = False
    freeze_embeddings: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_string(self) -> str:
        opts = [f"layers={self.layers}", f"pooling={self.pooling}", f"token_norm={int(self.token_norm)}",
                f"freeze_embeddings={int(self.freeze_embeddings)}"]
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
        elif key in ("token_norm", "freeze_embeddings"):
            fields[key] = bool(_int(name, key, value))
        else:
            from dsgen.suggest import did_you_mean

            known = ["layers", "pooling", "token_norm", "freeze_embeddings"]
            raise DsgenError(f"encoder spec '{name}': unknown option '{key}'{did_you_mean(key, known)}")
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
    return f"{name} ({spec.to_string()})" if name in ENCODER_ALIASES else spec.to_string()


def build_encoder(spec: CausalEncoderSpec, device: str) -> Any:
    """The sentence-transformers model of a spec (weights from the LM's plain checkpoint)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.base.modules.transformer import Transformer

    from dsgen.models import lm_source

    source, _, local_only = lm_source(spec.base)
    config = {"num_hidden_layers": spec.layers} if spec.layers else {}
    try:
        transformer = Transformer(source, config_kwargs=config, model_kwargs={"local_files_only": local_only},
                                  processor_kwargs={"local_files_only": local_only})
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load encoder base '{spec.base}': {str(exc).splitlines()[0]}") from None
    tok = transformer.tokenizer
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    modules: list[Any] = [transformer]
    if spec.token_norm:
        modules.append(FinalNorm.from_transformer(transformer))
    dim = transformer.get_embedding_dimension()
    if spec.pooling == "last":
        modules.append(Pooling(dim, pooling_mode="lasttoken"))
    elif spec.pooling == "mean-skip-first":
        modules.append(SkipFirstMeanPooling())
    else:
        modules.append(Pooling(dim, pooling_mode="mean"))
    model = SentenceTransformer(modules=modules, device=device)
    if spec.freeze_embeddings:
        transformer.auto_model.get_input_embeddings().weight.requires_grad_(False)
    return model


def _module_base() -> type:
    from sentence_transformers.base.modules.module import Module

    return Module


class FinalNorm(_module_base()):  # type: ignore[misc]
    """The LM's final normalisation (RMSNorm / LayerNorm) applied to every token state, a copy of
    its weights trained with the encoder."""

    config_keys: list[str] = []

    def __init__(self, norm: Any = None) -> None:
        super().__init__()
        self.norm = norm

    @classmethod
    def from_transformer(cls, transformer: Any) -> "FinalNorm":
        import copy

        base = transformer.auto_model
        norm = getattr(base, "norm", None) or getattr(getattr(base, "model", None), "norm", None)
        if norm is None:
            raise DsgenError("token_norm: this language model has no final norm layer to apply")
        return cls(copy.deepcopy(norm))

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        features["token_embeddings"] = self.norm(features["token_embeddings"])
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        import torch

        torch.save(self.norm, f"{output_path}/norm.pt")

    @classmethod
    def load(cls, model_name_or_path: str = "", **kwargs: Any) -> "FinalNorm":
        import torch

        return cls(torch.load(f"{model_name_or_path}/norm.pt", weights_only=False))


class SkipFirstMeanPooling(_module_base()):  # type: ignore[misc]
    """Mean over the real tokens of each sentence except its first position."""

    config_keys: list[str] = []

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        tokens, mask = features["token_embeddings"], features["attention_mask"].clone()
        first = mask.float().argmax(dim=1)  # the first real position (left or right padding)
        mask[mask.new_tensor(range(mask.shape[0])), first] = 0
        mask = mask.unsqueeze(-1).to(tokens.dtype)
        features["sentence_embedding"] = (tokens * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return features

    def save(self, output_path: str, *args: Any, **kwargs: Any) -> None:
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str = "", **kwargs: Any) -> "SkipFirstMeanPooling":
        return cls()
