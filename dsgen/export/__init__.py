"""Exports the ecosystem reads, each built from result files and the dataset cache, never from memory:

| export | module | written by |
| --- | --- | --- |
| a generated dataset as a Hugging Face dataset folder (Parquet splits + dataset card) | :mod:`dsgen.export.dataset_folder` | ``datasets``, ``huggingface_hub.DatasetCard`` |
| a trained encoder as a sentence-transformers folder with its model card | :mod:`dsgen.training.model_folder` (a run keeps it with ``--save-model``) | ``sentence-transformers`` |
| scores in MTEB's result layout | :mod:`dsgen.export.mteb_results` | ``mteb`` (an extra: ``pip install 'dsgen[mteb]'``) |

Each says where it came from and is written whole, replacing only what dsgen wrote as its kind
(:mod:`dsgen.folders`).
"""
