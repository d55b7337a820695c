"""A trained encoder as a sentence-transformers folder, with the library's generated model card.

``SentenceTransformer(folder)`` loads it with no dsgen code: dsgen's own modules are written as the
library's equivalents. The raw encoders' per-dimension standardisation (``lm:...?standardize=1``,
:class:`dsgen.encoders.Standardize`) becomes a ``Dense`` layer with weight ``diag(1 / std)``, bias
``-mean / std`` and the identity activation, the same affine map, so its statistics travel with the
model. The card is sentence-transformers' own (:class:`SentenceTransformerModelCardData`): base model,
training dataset, loss and training arguments (recorded by the library while dsgen trained), plus the
evaluation results on every task of the run and where it came from.

A model trained on templated text (GenSE's prompt, ``result.extra["training"]["text_template"]``) is
evaluated on the same template, so the folder keeps it: always in ``dsgen_provenance.json``
(``text_template``), and, when the template is a prefix (``"<prefix>{}"``), also as the
sentence-transformers default prompt, which ``SentenceTransformer(folder).encode`` applies by itself.
A template with text after the sentence (GenSE's ``"{} Question: ..."``) has no sentence-transformers
equivalent: :func:`folder_template` names what an evaluator must still apply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dsgen.folders import PROVENANCE, RESULT, provenance, staged_folder

PROMPT_NAME = "dsgen"  # the default prompt a prefix template becomes
KIND = "model-folder"


def prefix_of(template: str | None) -> str | None:
    """The prefix a ``str.format`` template prepends to the sentence, when that is all it does."""
    if not template:
        return None
    prefix = template[:-2] if template.endswith("{}") else None
    if prefix is None or "{" in prefix or "}" in prefix:
        return None
    return prefix


def folder_template(folder: Path) -> str | None:
    """The text template an evaluator must wrap every sentence in when scoring the model in ``folder``
    (``StsEvaluator.evaluate(..., template=)``): the training template recorded in its provenance,
    unless the folder's default prompt already applies it (a prefix template); None for a folder
    dsgen did not write or a model trained on plain text."""
    path = Path(folder) / PROVENANCE
    if not path.is_file():
        return None
    template = json.loads(path.read_text(encoding="utf-8")).get("text_template")
    if not template:
        return None
    config = Path(folder) / "config_sentence_transformers.json"
    if prefix_of(template) is not None and config.is_file():
        saved = json.loads(config.read_text(encoding="utf-8"))
        name = saved.get("default_prompt_name")
        if name and saved.get("prompts", {}).get(name) == prefix_of(template):
            return None
    return template


WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # what sentence-transformers (and transformers) save weights as


def holds_weights(folder: Path) -> bool:
    """Whether ``folder`` is a whole kept model: a sentence-transformers folder (``modules.json``) whose modules hold
    their weights (``model.safetensors`` or ``pytorch_model.bin``, at the top for the transformer module or in a
    module's folder, sharded ones by their index). A folder without them (a crash's leftovers, one emptied) is not a
    kept model."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file():
        return False
    names = (*WEIGHTS, "model.safetensors.index.json", "pytorch_model.bin.index.json")
    return any(path.name in names and path.is_file() for path in folder.rglob("*"))


def portable(model: Any) -> Any:
    """A copy of ``model`` made of sentence-transformers modules only (see the module docstring)."""
    import copy

    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    from dsgen.encoders import Standardize

    out = copy.deepcopy(model)
    for name, module in list(out.named_children()):
        if isinstance(module, Standardize):
            out._modules[name] = Dense(module.dim, module.dim, bias=True, activation_function=torch.nn.Identity(),
                                       init_weight=torch.diag(1.0 / module.std), init_bias=-module.mean / module.std)
    return out


def card_metrics(result: Any) -> dict[str, float]:
    """Evaluation results of a dsgen result as model-card metrics (Spearman and Pearson of cosine)."""
    out = {}
    for task, score in result.tasks.items():
        out[f"{task}_spearman_cosine"] = round(score.spearman / 100, 6)
        out[f"{task}_pearson_cosine"] = round(score.pearson / 100, 6)
    return out


def save_model_folder(model: Any, folder: Path, result: Any, base_model: str, dataset: str, command: str = "",
                      template: str | None = None, overwrite: bool | None = None) -> Path:
    """Write ``model`` as a sentence-transformers folder at ``folder`` (atomically), its card filled with
    the base model spec, the training dataset reference, the evaluation results of ``result`` and the
    provenance; returns the folder.

    Args:
        template: the text template the model was trained and evaluated with (default: the one the
            run's trainer recorded, ``result.extra["training"]["text_template"]``); see the module docstring.
        overwrite: replace an existing folder dsgen did not write as a model folder (never one holding
            runs; :func:`dsgen.folders.check_target_folder`); None (the runner's ``<run>.model/``): no such
            option is offered, such a folder is refused.
    """
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    if template is None:
        template = (result.extra.get("training") or {}).get("text_template")
    out = portable(model)
    prefix = prefix_of(template)
    if prefix is not None:
        out.prompts = {**out.prompts, PROMPT_NAME: prefix}
        out.default_prompt_name = PROMPT_NAME
    card = out.model_card_data
    card.model_name = f"dsgen {result.method} ({base_model}), preset {result.preset}"
    card.add_tags(["dsgen", "synthetic-data", str(result.method)])
    # the library records the training set's statistics while training, but cannot name it
    card.train_datasets = [{**info, "name": info.get("name") or dataset} for info in card.train_datasets] or [{"name": dataset}]
    for task in result.tasks:  # one evaluator per STS task, so the card lists each task's scores
        evaluator = EmbeddingSimilarityEvaluator(["a"], ["b"], [1.0], name=task, similarity_fn_names=["cosine"])
        card.set_evaluation_metrics(evaluator, {k: v for k, v in card_metrics(result).items() if k.startswith(task + "_")})
    origin = provenance(run_key=result.extra.get("run_key"), dataset_key=result.extra.get("dataset_key"), command=command,
                        base_model=base_model, method=result.method, preset=result.preset,
                        data_seed=result.data_seed, seed=result.seed, text_template=template)
    with staged_folder(folder, KIND, overwrite) as stage:
        out.save(str(stage))
        (stage / PROVENANCE).write_text(json.dumps(origin, indent=2, sort_keys=True, allow_nan=False) + "\n",
                                        encoding="utf-8")
        (stage / RESULT).write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n",
                                                 encoding="utf-8")
    return Path(folder)
