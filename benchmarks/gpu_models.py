"""Randomly initialised models of the papers' architectures, and tokenizers built here: what the GPU check times.

No weights are downloaded (a lent GPU machine reaches nothing): speed depends on the architecture, the dtype and
the number of tokens, not on what the weights learned.

- Generator: GPT2-XL's architecture (``GPT2Config(n_embd=1600, n_layer=48, n_head=25)``, 1.56 B parameters,
  vocabulary 50,257), built directly on the device in the preset's dtype.
- Encoder: roberta-base's (``RobertaConfig()``'s defaults are roberta-base's: 12 layers of 768, 125 M parameters),
  saved to a temporary folder as a plain transformer, so that dsgen's encoder loader adds mean pooling as it does
  for ``FacebookAI/roberta-base``.
- Tokenizers: byte-level BPE trained here on the STS sentences (GPT-2's and RoBERTa's tokenizers are byte-level BPE
  too, but theirs are not reachable). Tokenisation therefore differs from theirs; what drives the cost is how many
  tokens a sentence becomes, not the vocabulary: :data:`VOCAB` is chosen so that a sentence is as many tokens as
  under a general 49-50 k BPE (12.6 tokens per STS sentence at 16,000 merges-and-bytes, 12.9 under SmolLM2's 49 k
  tokenizer, measured on 3,000 of these sentences). The models keep the papers' vocabulary size (their embedding
  and output head cost what the real ones cost); ids beyond the tokenizer are never sampled (dsgen's decoder blocks
  them, as for any padded vocabulary).

``scale="tiny"`` shrinks every model to a few thousand parameters and the tokenizer to a few hundred tokens, so
that the whole check runs in seconds on a CPU (the CI test).
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCAB = {"full": 16000, "tiny": 400}  # tokenizer sizes (see the module docstring for the full one)
TINY_SENTENCES = 2000  # sentences the tiny tokenizer is trained on
GPT2_XL = dict(n_embd=1600, n_layer=48, n_head=25, n_positions=1024, vocab_size=50257)  # openai-community/gpt2-xl
GPT2_TINY = dict(n_embd=32, n_layer=2, n_head=2, n_positions=256)
ROBERTA_TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=258)
END = "<|endoftext|>"
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # roberta-base's ids 0-3, then <mask>


@dataclass
class BuiltModel:
    """A model the check built, with what its report says about it."""

    model: Any
    tokenizer: Any
    info: dict[str, Any]


@functools.lru_cache(maxsize=2)
def tokenizer_sentences(data_dir: str | None, scale: str) -> list[str]:
    """The sentences the tokenizers are trained on: every distinct sentence of dsgen's STS tasks and the STSb train
    inputs (DINO's x1), or the first :data:`TINY_SENTENCES` of them at the tiny scale."""
    from dsgen.data.inputs import load_inputs
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.evaluation.tasks import TASKS

    sentences = list(dict.fromkeys(StsEvaluator(TASKS.names(), data_dir).distinct_sentences()
                                   + load_inputs("stsb-train", None, data_dir)))
    return sentences[:TINY_SENTENCES] if scale == "tiny" else sentences


def train_bpe(sentences: list[str], vocab_size: int, specials: list[str]) -> Any:
    """A byte-level BPE (GPT-2's and RoBERTa's kind) trained on ``sentences``; a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sentences, trainer)
    return tok


def generator_tokenizer(sentences: list[str], scale: str) -> Any:
    """GPT-2's layout: one special token, ``<|endoftext|>``, that is also the padding (left: a decoder pads left)."""
    from transformers import PreTrainedTokenizerFast

    tok = train_bpe(sentences, VOCAB[scale], [END])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=END, eos_token=END, pad_token=END,
                                   padding_side="left")


def encoder_tokenizer(sentences: list[str], scale: str) -> Any:
    """RoBERTa's layout: ``<s> ... </s>`` around every sentence, ``<pad>`` id 1 (``RobertaConfig``'s pad id)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = train_bpe(sentences, VOCAB[scale], ROBERTA_SPECIALS)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")


def _count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def build_generator(sentences: list[str], scale: str, device: str, dtype: str, seed: int = 0) -> BuiltModel:
    """GPT2-XL's architecture with random weights, on ``device`` in ``dtype`` (built there: no 6 GB copy)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dsgen.models import resolve_dtype

    tok = generator_tokenizer(sentences, scale)
    sizes = dict(GPT2_XL) if scale == "full" else {**GPT2_TINY, "vocab_size": len(tok)}
    end = tok.convert_tokens_to_ids(END)
    cfg = GPT2Config(**sizes, bos_token_id=end, eos_token_id=end, pad_token_id=end)
    torch.manual_seed(seed)
    with torch.device(device):
        model = GPT2LMHeadModel(cfg)
    model = model.to(resolve_dtype(dtype)).eval()
    model.generation_config.pad_token_id = end
    info = {"architecture": "gpt2-xl" if scale == "full" else "gpt2 (tiny)", "weights": "random",
            "config": {k: sizes[k] for k in ("n_embd", "n_layer", "n_head", "vocab_size")},
            "parameters": _count(model), "dtype": dtype, "device": str(next(model.parameters()).device),
            "tokenizer": f"byte-level BPE, {len(tok)} tokens, trained here on the STS sentences (not GPT-2's)"}
    return BuiltModel(model, tok, info)


def build_encoder_folder(sentences: list[str], scale: str, folder: Path | None = None, seed: int = 0) -> tuple[Path, dict]:
    """roberta-base's architecture with random weights and a tokenizer built here, saved as a plain transformer
    folder (``dsgen.encoders.load_encoder`` adds mean pooling, as for ``FacebookAI/roberta-base``)."""
    import torch
    from transformers import RobertaConfig, RobertaModel

    tok = encoder_tokenizer(sentences, scale)
    sizes = {} if scale == "full" else {**ROBERTA_TINY, "vocab_size": len(tok)}
    cfg = RobertaConfig(**sizes, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    model = RobertaModel(cfg)  # with its pooler, as roberta-base's checkpoint (mean pooling reads no pooler)
    folder = Path(folder or tempfile.mkdtemp(prefix="dsgen-gpu-check-encoder-"))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    info = {"architecture": "roberta-base" if scale == "full" else "roberta (tiny)", "weights": "random",
            "config": {"hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
                       "num_attention_heads": cfg.num_attention_heads, "vocab_size": cfg.vocab_size},
            "parameters": _count(model), "pooling": "mean (dsgen's loader, as for a plain transformer)",
            "tokenizer": f"byte-level BPE, {len(tok)} tokens, trained here on the STS sentences (not RoBERTa's)",
            "folder": str(folder)}
    del model
    return folder, info
