"""CLAIF (Cheng et al., Findings of ACL 2023, "Improving Contrastive Learning of Sentence Embeddings from
AI Feedback"): pairs of graded similarity made by masking a share of each sentence's words and asking the
LM to fill them in (rates 0.0 to 0.8; 0.0 uses DINO's paraphrase prompt), each pair labelled by the LM's
own similarity score (AI feedback), then DINO's postprocessing and the regression trainer.

Prompts (task spec ``claif``): ``xiami2019/CLAIF@34f0dce:modeling.py#L186-L190``, masking ``#L34-L55``,
rates ``#L76``; scoring ``#L197-L200`` (labeller ``lm-judge``). Completion prompts (text-davinci-003), so
no chat template. Sampling: temperature 0.7, top-p 0.9 (``data_generation.py#L21``, ``#L39``).
Postprocessing (``postprocess_dataset.py#L12-L58``): DINO's, rewrites still holding ``<mask>`` dropped,
smoothing 0.2 applied to the score, random pairs at 0 unsmoothed. Training (``run_training.py``): cosine
regression, batch 32, lr 2e-5, 3 epochs, STSb dev selection every 125 steps.

Departures: the judge reads the expected digit of a 0-5 score at its answer's first position (CLAIF asks
for 0.0-1.0 and parses the first number of a sampled answer with its reason); every input's rate 0.0 uses
the paraphrase prompt (CLAIF's ``first_no_mask`` gives it to the first sentence of each API batch only, the
others a "Replace all <mask> tokens" prompt with nothing masked); words are split on whitespace (CLAIF
splits on single spaces); at most 40 tokens per rewrite (256 there). The same LM generates and judges, as
in CLAIF (text-davinci-003 for both).
"""

from dsgen.method import Method, register_method
from dsgen.methods.dino import dino_recipe


@register_method("claif")
def claif() -> Method:
    return dino_recipe(description="CLAIF: masked-and-rewritten pairs labelled by the LM's own 0-5 similarity score, "
                                   "DINO's postprocessing, regression trainer",
                       paper="CLAIF: Cheng et al., Findings of ACL 2023",
                       generation={"task": "claif", "per_label": 1, "counter_labels": False,
                                   "sampling": {"top_k": 0, "top_p": 0.9, "temperature": 0.7}},
                       postprocess={"label_smoothing": 0.0, "drop_containing": "<mask>"},
                       labeller="lm-judge", labeller_config={"label_smoothing": 0.2, "judge_random_pairs": False},
                       trainer_config={"epochs": 3.0, "evaluation_steps": 125, "selection_data": "stsb-dev"})
