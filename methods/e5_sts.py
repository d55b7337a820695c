"""E5-style STS triplets (Wang et al., ACL 2024, "Improving Text Embeddings with Large Language Models"):
one call of an LLM writes S1, a sentence S2 of a high similarity score to it and a sentence S3 of a lower
one, as a JSON object; S1 is the anchor, S2 the positive and S3 the hard negative of contrastive training.

Prompt: the paper's STS template (ACL version Table 12, arXiv Table 11; task spec ``e5-sts``) with
{unit} = sentence, {language} = English and the score ranges {high_score} in {4, 4.5, 5}, {low_score} in
{2.5, 3, 3.5}, through the chat path (GPT-4); a JSON object per call, outputs that do not parse dropped.
Sampling temperature 1.0, top-p 1.0 (Appendix C). Training (Sec. 3.2, 4.2): InfoNCE with in-batch and one
hard negative at temperature 0.02, one epoch.

Departures: three fixed draws of the placeholders (one per label) instead of a draw per call; E5 trains
Mistral-7B with LoRA, last-token pooling and a query instruction, here the preset's encoder without one;
S3's requested score is mid-scale (2.5-3.5), so it is a related sentence used as a hard negative, as E5 uses it.
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY


@register_method("e5-sts")
def e5_sts() -> Method:
    return Method(description="E5 STS triplets: S1, a high-score S2 and a low-score S3 in one JSON answer (chat), "
                              "InfoNCE with S3 as hard negative",
                  paper="E5: Wang et al., ACL 2024", generator="debiased",
                  generation={"task": "e5-sts", "counter_labels": False,
                              "sampling": {"top_k": 0, "top_p": 1.0, "temperature": 1.0, "max_new_tokens": 120}},
                  postprocess=TRIPLETS_ONLY, trainer="contrastive",
                  trainer_config={"prompt": False, "temperature": 0.02, "epochs": 1.0, "selection_data": None})
