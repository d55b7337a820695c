"""Sim-GPT (Wang et al., 2023, "Sim-GPT: Text Similarity via GPT Annotated Data"): for each input, GPT-4
writes one "definitely similar" and one "definitely dissimilar" sentence in a single answer (an 8-shot
prompt adapted from the NLI crowd-workers' instructions); the triplets train supervised SimCSE.

Prompt: ``ShuheWang1998/Sim-GPT@230f6ec:prompts/multi_genre_sentences.txt#L1-L48`` verbatim (task spec
``sim-gpt``, a numbered answer: ``1. <similar>`` / ``2. <dissimilar>``), through the chat path (GPT-4: the ``paper``
preset asks it through the ``openai`` generator). Training (``training-parameters/simcse/sup_roberta_base.sh#L17-L39``):
SimCSE's trainer (:data:`dsgen.methods.syncse.SIMCSE_TRAINER`: no warm-up, no weight decay), 5 epochs, lr 5e-5,
batch 512 (4 GPUs x 128, gathered across GPUs by SimCSE's loss), 32 tokens, [CLS] pooling, the best STSb dev
checkpoint evaluated every 125 steps only.

Output cap: the repository has prompts only (no generation code, GPT-4's API caps nothing by default); an answer
holds two sentences on numbered lines and ends at a blank line, so twice the measured cap of one sentence
(:data:`dsgen.methods.syncse.SENTENCE_TOKENS`, 80): 160 tokens.

Departures: the multi-genre prompt for every input (Sim-GPT also has caption and question prompts, by
source); sampling is not given in its repository (top-p 0.9 here); no auxiliary MLM loss (weight 0.05
there); the encoder's own pooling; off ``paper``, the preset's encoder, batch and generator.
"""

from dsgen.method import Method, register_method
from dsgen.methods.gense import TRIPLETS_ONLY
from dsgen.methods.syncse import SENTENCE_TOKENS, SIMCSE_TRAINER


@register_method("sim-gpt")
def sim_gpt() -> Method:
    return Method(description="Sim-GPT: one similar and one dissimilar sentence per input in one answer (8-shot, chat), "
                              "SimCSE's InfoNCE with the dissimilar one as hard negative",
                  paper="Sim-GPT: Wang et al., 2023 (arXiv 2312.05603)", generator="debiased",
                  generation={"task": "sim-gpt", "per_label": 1, "counter_labels": False,
                              "sampling": {"top_k": 0, "top_p": 0.9, "max_new_tokens": 2 * SENTENCE_TOKENS}},
                  postprocess=TRIPLETS_ONLY, trainer="contrastive",
                  trainer_config={**SIMCSE_TRAINER, "epochs": 5.0, "evaluation_steps": 125})
