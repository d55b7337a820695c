"""SynCSE (Zhang, Lan & He, EMNLP 2023, "Contrastive Learning of Sentence Embeddings from Scratch"): an
instruction-following LLM writes, for each input sentence, a paraphrase (the positive) and a
contradiction (the hard negative); the encoder trains as supervised SimCSE on the triplets.

- ``syncse-partial``: the inputs are given (the paper: NLI premises; here the preset's STSb sentences).
- ``syncse-scratch``: the inputs are generated too, per genre and topics (paper Table 15, Table 10,
  Appendix B), then annotated as in ``partial``.

Prompts (task specs ``syncse`` and ``syncse-scratch``): paper Table 12 Prompt1 (positive), Table 1
Prompt1 (hard negative), Table 15 Prompt1 (sentences). The repository (hkust-nlp/SynCSE@f8e0a9b) has no
generation code. Settings (paper Appendix C; ``scripts/sup_train_mp.sh#L19-L42``): temperature 1.0,
top-p 0.9 (hard negatives 0.95), one of each per input; sentences at temperature 1.3, top-p 1.0;
SimCSE's InfoNCE at 0.05, lr 5e-5, batch 512, 3 epochs, 32 tokens, the checkpoint chosen on STS
dev every 25 steps. Through the chat path (SynCSE prompts ChatGPT).

Departures (each a setting): one prompt of each pool instead of a random one per call; zero-shot
instead of 5-shot (the exemplar pools are unpublished); one sampling setting for both labels (top-p
0.9); one sentence per call in ``scratch`` instead of 20, three genres with fixed topics; selection on
STSb dev alone (SynCSE averages STSb and SICK-R dev); no auxiliary MLM loss (``--do_mlm`` in its script);
the preset's encoder and batch (SynCSE: RoBERTa-base, [CLS] pooling, 512).
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY

PAPER = "SynCSE: Zhang et al., EMNLP 2023"
SAMPLING = {"top_k": 0, "top_p": 0.9, "temperature": 1.0}
SIMCSE = {"prompt": False, "max_seq_length": 32, "epochs": 3.0, "evaluation_steps": 25}


def syncse_recipe(**changes) -> Method:
    recipe = dict(paper=PAPER, generator="debiased", postprocess=TRIPLETS_ONLY, trainer="contrastive",
                  generation={"task": "syncse", "per_label": 1, "counter_labels": False, "sampling": SAMPLING},
                  trainer_config=SIMCSE)
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
                         x1_generation={"task": "syncse-scratch", "counter_labels": False,
                                        "sampling": {"top_k": 0, "top_p": 1.0, "temperature": 1.3}})
