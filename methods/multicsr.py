"""MultiCSR (Wang et al., NAACL 2024, "Large Language Models can Contrastively Refine their Generation for
Better Sentence Representation Learning"): an LLM writes an entailment and a contradiction per input, rates
every pair's similarity, and keeps only triplets it rates apart (self-curation); the encoder trains
contrastively with in-batch negatives that an unsupervised SimCSE encoder finds too similar masked out.

Prompts (task spec ``multicsr``): ``Circle-Ming/MultiCSR@596898f:flan_generate_scoring.py#L51-L57`` and
``#L66-L72`` (2-shot, Flan-T5-XL, greedy, ``generate(max_length=256)`` at ``#L119``, ``#L123``: the output cap, 256
tokens); rating prompt ``#L129-L132`` (labeller ``lm-judge``: the score the judge writes greedily, kept only when
the whole answer is a number, ``flan_filter.py#L148-L156``, beside the label). Curation ``flan_filter.py#L162-L173``
(reweighter ``self-curation``, filter type 15: positive >= 3, negative <= 3 of 5, the two different) on those
written scores. Training (``run.sh#L30-L35``, README's command ``-e 3 -b 128 -r 5e-5 -l 32 -t 25 -p 0.95``): SimCSE's
trainer (:data:`dsgen.methods.syncse.SIMCSE_TRAINER`: no warm-up, no weight decay), 3 epochs, lr 5e-5, batch 128, 32
tokens, the best STSb dev checkpoint evaluated every 25 steps only, and MultiCSR's loss (``simcse/models.py#L243-L270``,
:class:`~dsgen.training.losses.MultiCSRGuidedLoss`): every candidate whose guide cosine with the anchor exceeds 0.95
masked (multiplied by 0), a binary cross-entropy of every softmax entry. The guide is unsupervised SimCSE (README: "We
highly suggest using the pre-trained checkpoints of SimCSE", ``princeton-nlp/unsup-simcse-bert-base-uncased``),
trained here the way SimCSE trains it from the run's encoder on the method's own input sentences
(:mod:`dsgen.training.guide`); ``guide = "<encoder>"`` takes a published one.

Its judge discards every answer that is not a bare number (``flan_filter.py#L155-L156``) as part of its curation: a
small LM writes a longer number (``0.00015556``) for a few pairs in ten, so up to half of the pairs may go unscored
(``max_abstention_share`` 0.5) before the run fails as a judge that does not answer as asked.

Departures: the preset's inputs (MultiCSR: NLI premises or Wikipedia sentences); double instead of single quotes
in the prompts; the rating prompt followed by ``\nScore:`` so a causal LM answers with the score (Flan-T5 answers the
bare prompt); no swap of a triplet the judge rates the other way
round (dropped); the guide trained on the method's inputs (MultiCSR's: a million Wikipedia sentences), and run
without dropout; the encoder's own pooling (MultiCSR: [CLS]); off ``paper``, the preset's encoder and batch; its
generator Flan-T5-XL is an encoder-decoder, which the debiased core (causal LMs) does not run: on ``paper`` an
instruction-tuned causal LM of its size.
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY
from dsgen.methods.syncse import SIMCSE_TRAINER

RATING = "Scoring the semantic similarity of the following sentences between 0.0 and 5.0:                 (a) {x1} (b) {x2}"
UNSCORED_SHARE = 0.5  # the module docstring: MultiCSR's judge discards every answer that is not a bare number


@register_method("multicsr")
def multicsr() -> Method:
    return Method(description="MultiCSR: entailment + contradiction (2-shot), the LM's own written ratings keep "
                              "triplets it rates apart, false negatives masked by an unsupervised SimCSE guide",
                  paper="MultiCSR: Wang et al., NAACL 2024", generator="debiased",
                  generation={"task": "multicsr", "per_label": 1, "counter_labels": False,
                              "sampling": {"top_k": 1, "max_new_tokens": 256}},
                  postprocess=TRIPLETS_ONLY, labeller="lm-judge",
                  labeller_config={"prompt": RATING, "answer_prefix": "\nScore:", "read": "written", "parse": "exact",
                                   "replace_label": False, "max_abstention_share": UNSCORED_SHARE},
                  reweighter="self-curation", reweighter_config={"max_abstention_share": UNSCORED_SHARE},
                  trainer="contrastive",
                  trainer_config={**SIMCSE_TRAINER, "loss": "multicsr", "guide": "unsup-simcse", "guide_threshold": 0.95,
                                  "epochs": 3.0, "evaluation_steps": 25})
