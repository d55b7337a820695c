"""CLAIF (Cheng et al., Findings of ACL 2023, "Improving Contrastive Learning of Sentence Embeddings from AI
Feedback"): pairs of graded similarity made by masking a share of each sentence's words and asking the
LM to fill them in (rates 0.0 to 0.8; 0.0 uses DINO's paraphrase prompt), each pair labelled by the LM's
own similarity score (AI feedback), then DINO's postprocessing and the regression trainer.

Prompts (task spec ``claif``): ``xiami2019/CLAIF@34f0dce:modeling.py#L186-L190``, masking ``#L34-L55``,
rates ``#L76``; output cap 256 tokens (``data_generation.py#L19`` ``--max_output_length 256``). Completion prompts
(text-davinci-003), so no chat template. Sampling: temperature 0.7, top-p 0.9 (``data_generation.py#L21``, ``#L39``).

AI feedback (labeller ``lm-judge``): CLAIF's scoring prompt verbatim (``modeling.py#L197-L200``, a score "in the range
from 0.0 to 1.0"), the score the first number the judge's answer writes (``#L225-L237``; ``read = "written"``,
``parse = "first"``, ``max_score = 1``), an answer without one dropped (``#L230-L233``). Postprocessing
(``postprocess_dataset.py#L12-L58``, which runs after the scoring): DINO's, rewrites still holding ``<mask>`` dropped,
smoothing 0.2 applied to the score (``0.8 * score + 0.1``, ``#L38``), at most 2 pairs per (input, score)
(``#L40-L44``: DINO's cap, counted on the judge's score; the labeller's ``max_per_x1_score``), 2 random pairs per
input at 0, unsmoothed (``#L46-L57``). Training (``README.md``'s command and ``run_training.py``): cosine regression on
every pair (``--using_stsb_dev`` makes the dev split 0: ``run_training.py#L182-L188``; no 10% hold-out), batch 32, lr
2e-5, 3 epochs, 10% warm-up (``#L232-L233``), the best STSb dev checkpoint (gold / 5) evaluated every 125 steps and at
each epoch's end (sentence-transformers 2.2.2's ``fit``, ``requirements.txt``: weight decay 0.01, ``transformers.AdamW``
with its defaults, bias-corrected, eps 1e-6, since ``optimizer_params={'lr': lr}`` at ``#L235`` replaces the library's;
inputs up to 512 tokens, RoBERTa's own length, which ``models.Transformer(model_name)`` at ``#L49`` keeps).

Departures: the judge's answer decoded greedily (CLAIF samples it at temperature 0.7, top-p 0.9, as its rewrites:
``modeling.py#L162-L164``); a score beyond 0.0-1.0 gives no score (CLAIF would keep it as a label); every input's
rate 0.0 uses the paraphrase prompt (CLAIF's ``first_no_mask`` gives it to the first sentence of each API batch only,
the others a "Replace all <mask> tokens" prompt with nothing masked); words are split on whitespace (CLAIF splits on
single spaces); the first two pairs per (input, score) in generation order (CLAIF's after a seeded shuffle and a
``set()``); random pairs drawn from other inputs; the encoder's own pooling (CLAIF: [CLS], ``--pooler_type cls``);
text-davinci-003, which writes and judges in CLAIF, was retired by OpenAI in January 2024: on ``paper`` an
instruction-tuned open model does both (the same model, as in CLAIF).
"""

from dsgen.labelling.lm_judge import CLAIF_PROMPT
from dsgen.method import Method, register_method
from dsgen.methods.dino import dino_recipe

CLAIF_JUDGE = {"prompt": CLAIF_PROMPT, "read": "written", "parse": "first", "max_score": 1, "label_smoothing": 0.2,
               "judge_random_pairs": False, "max_per_x1_score": 2}
CLAIF_TRAINER = {"epochs": 3.0, "evaluation_steps": 125, "selection_data": "stsb-dev", "optimizer": "adamw-torch",
                 "adam_epsilon": 1e-6, "max_seq_length": 512}


@register_method("claif")
def claif() -> Method:
    return dino_recipe(description="CLAIF: masked-and-rewritten pairs labelled by the LM's own 0.0-1.0 similarity score, "
                                   "DINO's postprocessing, regression trainer",
                       paper="CLAIF: Cheng et al., Findings of ACL 2023",
                       generation={"task": "claif", "per_label": 1, "counter_labels": False,
                                   "sampling": {"top_k": 0, "top_p": 0.9, "temperature": 0.7, "max_new_tokens": 256}},
                       postprocess={"label_smoothing": 0.0, "drop_containing": "<mask>", "validation_fraction": 0.0},
                       labeller="lm-judge", labeller_config=CLAIF_JUDGE, trainer_config=CLAIF_TRAINER)
