"""SynCSE (Zhang, Lan & He, EMNLP 2023, "Contrastive Learning of Sentence Embeddings from Scratch"): an
instruction-following LLM writes, for each input sentence, a paraphrase (the positive) and a
contradiction (the hard negative); the encoder trains as supervised SimCSE on the triplets.

- ``syncse-partial``: the inputs are given (the paper: NLI premises; here the preset's STSb sentences).
- ``syncse-scratch``: the inputs are generated too, per genre and topics (paper Table 15, Table 10,
  Appendix B), then annotated as in ``partial``.

Prompts (task specs ``syncse`` and ``syncse-scratch``): paper Table 12 Prompt1 (positive), Table 1
Prompt1 (hard negative), Table 15 Prompt1 (sentences). The repository (hkust-nlp/SynCSE@f8e0a9b) has no
generation code. Settings (paper Appendix C): temperature 1.0, top-p 0.9 (hard negatives 0.95), one of each per
input; sentences at temperature 1.3, top-p 1.0. Through the chat path (SynCSE prompts ChatGPT, gpt-3.5-turbo: the
``paper`` preset asks it through the ``openai`` generator).

Output cap (``max_new_tokens``): the repository publishes no generation code and ChatGPT's API caps nothing by
default, so the cap is measured: a paraphrase or contradiction is about as long as its input, and the STS benchmark's
10,536 distinct train sentences take at most 72 SmolLM2 tokens (p99 42, p99.9 54): 80 tokens cut no output that long
(DINO's 40 cut about 1 in 100 inputs' length, more for wordier rewrites). The generated sentences ask for "3-5 words to
20-40 words" (Table 15): 80 as well.

Training: SimCSE's trainer as SynCSE's script runs it (``scripts/sup_train_mp.sh#L19-L42``: InfoNCE at temperature
0.05, lr 5e-5, batch 512, 3 epochs, 32 tokens, the checkpoint chosen on STS dev every 25 steps, evaluated at those
steps only, ``--evaluation_strategy steps``) with SimCSE's optimiser defaults (:data:`SIMCSE_TRAINER`: no warm-up, no
weight decay, bias-corrected AdamW with eps 1e-8: ``princeton-nlp/SimCSE@49fa580:train.py#L188`` keeps transformers
4.2.1's ``TrainingArguments`` defaults, pinned in its ``requirements.txt``, and ``simcse/trainers.py#L313`` builds the
optimizer and schedule from them), not the contrastive trainer's GenSE/Sentence-BERT defaults (10% warm-up, weight
decay 0.01).

Departures (each a setting): one prompt of each pool instead of a random one per call; zero-shot instead of
5-shot (the exemplar pools are unpublished); one sampling setting for both labels (top-p 0.9); one sentence per
call in ``scratch`` instead of 20, three genres with fixed topics, and a sentence that breaks the output rules asked
again up to 5 times (``x1_generation.max_attempts``; ChatGPT's answers rarely need it, a small model's often do, and
without it the triplets of a small preset fit one batch); selection on STSb dev alone (SynCSE averages STSb and
SICK-R dev, ``--metric_for_best_model avg_sts``); no auxiliary MLM loss (``--do_mlm``); the encoder's own pooling (SynCSE:
[CLS] with SimCSE's MLP, ``--pooler_type cls``); off ``paper``, the preset's encoder, batch and generator.
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY

PAPER = "SynCSE: Zhang et al., EMNLP 2023"
SENTENCE_TOKENS = 80
"""The output cap of one generated sentence (the module docstring: STSb train sentences take at most 72 SmolLM2
tokens); the later methods that write several sentences per output take a multiple of it."""
SAMPLING = {"top_k": 0, "top_p": 0.9, "temperature": 1.0, "max_new_tokens": SENTENCE_TOKENS}
SIMCSE_TRAINER = {"prompt": False, "max_seq_length": 32, "learning_rate": 5e-5, "temperature": 0.05,
                  "warmup_ratio": 0.0, "weight_decay": 0.0, "optimizer": "adamw-torch", "selection_data": "stsb-dev",
                  "selection_metric": "cosine", "evaluate_at_epoch_end": False}
"""SimCSE's supervised trainer, shared by the methods built on its code (SynCSE, Sim-GPT, MultiCSR): no prompt, 32
tokens (``--max_seq_length 32``), lr 5e-5, temperature 0.05, no warm-up and no weight decay (transformers 4.2.1's
``TrainingArguments`` defaults, ``train.py#L188``), the best STS dev checkpoint evaluated every N steps only
(``--evaluation_strategy steps --load_best_model_at_end``; SentEval's cosine Spearman). Each method adds its epochs
and N."""
SYNCSE_TRAINER = {**SIMCSE_TRAINER, "epochs": 3.0, "evaluation_steps": 25}


def syncse_recipe(**changes) -> Method:
    recipe = dict(paper=PAPER, generator="debiased", postprocess=TRIPLETS_ONLY, trainer="contrastive",
                  generation={"task": "syncse", "per_label": 1, "counter_labels": False, "sampling": SAMPLING},
                  trainer_config=SYNCSE_TRAINER)
    recipe.update(changes)
    return Method(**recipe)


@register_method("syncse-partial")
def syncse_partial() -> Method:
    return syncse_recipe(description="SynCSE-partial: an LLM's paraphrase and contradiction of each input (chat), "
                                     "SimCSE's InfoNCE with the contradiction as hard negative")


@register_method("syncse-scratch")
def syncse_scratch() -> Method:
    return syncse_recipe(description="SynCSE-scratch: the inputs generated too (genres and topics), then annotated as "
                                     "syncse-partial",
                         x1_generation={"task": "syncse-scratch", "counter_labels": False, "max_attempts": 5,
                                        "sampling": {"top_k": 0, "top_p": 1.0, "temperature": 1.3,
                                                     "max_new_tokens": SENTENCE_TOKENS}})
