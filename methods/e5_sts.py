"""E5-style STS triplets (Wang et al., ACL 2024, "Improving Text Embeddings with Large Language Models"): one call
of an LLM writes S1, a sentence S2 of a high similarity score to it and a sentence S3 of a lower one, as a JSON
object; S1 is the anchor, S2 the positive and S3 the hard negative of contrastive training.

Prompt: the paper's STS template (ACL version Table 12, arXiv Table 11; task spec ``e5-sts``) with
{unit} = sentence, {language} = English and the score ranges {high_score} in {4, 4.5, 5}, {low_score} in
{2.5, 3, 3.5}, through the chat path (GPT-4: the ``paper`` preset asks it through the ``openai`` generator); a JSON
object per call, outputs that do not parse dropped. Sampling temperature 1.0, top-p 1.0 (Appendix C). Training (Sec.
3.2, 4.2): InfoNCE with in-batch and one hard negative at temperature 0.02, one epoch, the last step (no checkpoint
selection is described).

How much data: E5 writes its anchors itself, so it makes as many calls as the preset gives every method that writes
its inputs (``x1_entries_per_label`` per label: as many as ``dino-x1x2``'s and ``syncse-scratch``'s x1; 40 x 3 on
``cpu``, 5,000 x 3 on ``paper``), a call whose answer does not parse asked again up to 10 times (``max_attempts``). On
``cpu`` SmolLM2-135M's answers parse about 1 time in 22 (data seed 1: 44 of 984 tries, 847 rejected as unparsed JSON,
93 unclosed), so 40 x 3 calls made 37 triplets, one optimizer step at batch 64: ``cpu`` gives E5 three times the
calls and batch 8 (``[methods.e5-sts]`` in ``benchmarks/presets/cpu.toml``, a named departure). Output cap: no
generation code is published and GPT-4's API caps nothing by default; an answer holds three sentences and the JSON
around them, so three times the measured cap of one sentence (:data:`dsgen.methods.syncse.SENTENCE_TOKENS`, 80) plus
the keys: 256 tokens (SmolLM2's answers took 59 tokens on average).

Departures: three fixed draws of the placeholders (one per label) instead of a draw per call; a call whose JSON does
not parse asked again (GPT-4's nearly always parse; E5 keeps one answer per call); E5 trains Mistral-7B with LoRA,
last-token pooling and a query instruction (and its optimiser settings for the LoRA adapters), here the contrastive
trainer's defaults on the preset's encoder without an instruction (``paper``: RoBERTa-base, E5's batch of 2,048);
S3's requested score is mid-scale (2.5-3.5), so it is a related sentence used as a hard negative, as E5 uses it.
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY


@register_method("e5-sts")
def e5_sts() -> Method:
    return Method(description="E5 STS triplets: S1, a high-score S2 and a low-score S3 in one JSON answer (chat), "
                              "InfoNCE with S3 as hard negative",
                  paper="E5: Wang et al., ACL 2024", generator="debiased",
                  generation={"task": "e5-sts", "counter_labels": False, "max_attempts": 10,
                              "sampling": {"top_k": 0, "top_p": 1.0, "temperature": 1.0, "max_new_tokens": 256}},
                  postprocess=TRIPLETS_ONLY, trainer="contrastive",
                  trainer_config={"prompt": False, "temperature": 0.02, "epochs": 1.0, "model_selection": False})
