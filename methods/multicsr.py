"""MultiCSR (Wang et al., NAACL 2024, "Large Language Models can Contrastively Refine their Generation for
Better Sentence Representation Learning"): an LLM writes an entailment and a contradiction per input, rates
every pair's similarity, and keeps only triplets it rates apart (self-curation); the encoder trains
contrastively with in-batch negatives that a pre-trained encoder finds too similar masked out.

Prompts (task spec ``multicsr``): ``Circle-Ming/MultiCSR@596898f:flan_generate_scoring.py#L51-L57`` and
``#L66-L72`` (2-shot, Flan-T5-XL, greedy); rating prompt ``#L129-L132`` (labeller ``lm-judge``, the score
kept beside the label); curation ``flan_filter.py#L162-L173`` (reweighter ``self-curation``: positive >= 3,
negative <= 3 of 5, positive above negative). Training (``run.sh#L30-L35``): 3 epochs, lr 5e-5, batch 128,
32 tokens, STSb dev selection every 25 steps, negatives masked by unsupervised SimCSE at cosine 0.95.

Departures: sentence-transformers' ``GISTEmbedLoss`` with all-MiniLM-L6-v2 as the guide (it masks a
negative the guide finds more similar to the anchor than the positive, to -inf, with a cross-entropy loss;
MultiCSR uses a fixed 0.95 threshold on SimCSE's cosine, multiplies masked logits by 0 and uses a per-entry
binary loss); double instead of single quotes in the prompts; the judge's expected digit instead of a
greedily decoded number; no swap of a pair the judge rates the other way round; the preset's encoder and batch.
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY

RATING = "Scoring the semantic similarity of the following sentences between 0.0 and 5.0:                 (a) {x1} (b) {x2}"


@register_method("multicsr")
def multicsr() -> Method:
    return Method(description="MultiCSR: entailment + contradiction (2-shot), the LM's own ratings keep triplets it "
                              "rates apart, GIST loss guided by all-MiniLM-L6-v2",
                  paper="MultiCSR: Wang et al., NAACL 2024", generator="debiased",
                  generation={"task": "multicsr", "per_label": 1, "counter_labels": False, "sampling": {"top_k": 1}},
                  postprocess=TRIPLETS_ONLY, labeller="lm-judge",
                  labeller_config={"prompt": RATING, "answer_prefix": "\nScore:", "replace_label": False},
                  reweighter="self-curation", trainer="contrastive",
                  trainer_config={"prompt": False, "loss": "gist", "max_seq_length": 32, "epochs": 3.0,
                                  "evaluation_steps": 25})
