"""The identity of every artefact: one key function per kind, used by everything that caches.

Keys are built the way ``datasets`` builds fingerprints: each is derived from the keys of what it
consumes, and contents are hashed, never paths. A run's key is computed from its datasets' keys
(which hash the inputs' texts, the task spec as used and the generator model), so an edited inputs
file, task spec or human-source file is a new key even at the same path.

| artefact | key | what goes in |
| --- | --- | --- |
| texts (inputs, statistics sentences, a source) | :func:`texts_key` | the texts, in order |
| a file (an NLI triplet file, a GGUF file) | :func:`file_key` | its bytes (hashed once per process while its stat is unchanged) |
| a local model (a file or a folder) | :func:`local_model_key` | the bytes of every file it loads from, custom code (``*.py``) and chat template included |
| generated dataset | :func:`dataset_key` | generator name and version, its coerced config, the task spec actually used, the inputs' key, the generator model's fingerprint |
| stage of a run | :func:`stage_identity` | the component's name, version and config dict |
| run result | :func:`run_key` | the keys of its datasets, every stage's identity, the seeds, the training thread count (a trained run), every model's fingerprint, the sources a stage reads, the evaluation data's key and settings |
| evaluation data | :func:`evaluation_data_key` | the exact pairs evaluated and their gold scores, per task |
| result folder | :func:`variant_key` | what the user asked for except the seeds: method recipe, every resolved (coerced) setting of the plan, command-line overrides |
| zero-shot judge score | :func:`score_key` | the scoring model's fingerprint, the prompt, the pair |
| dequantised checkpoint | :func:`checkpoint_key` | the GGUF file's name, size and bytes |
| exported file | :func:`content_key` | the rows it holds |
| an in-memory model (one handed over, not named) | :func:`weights_key` | its parameters' bytes |
| process-local cache of a model's derived values | :func:`model_key` | the model's fingerprint |
| data-level fit (RISE's SDI classifier, a guide encoder), ``cache/fits/`` | :func:`data_fit_key` | its kind and version, the stage's settings it depends on, the keys of what it reads (the dataset's key and filters, the inputs' or the source's texts), its models' fingerprints, the data seed, the training thread count |
| the numerics probe's answer, ``$DSGEN_CACHE_DIR/numerics/`` | :func:`dsgen.generation.invariance.probe_key` | the probe's version, the CPU (capability, vendor, model, vector flags, MKL's instruction cap and code path, oneDNN's instruction cap), the thread count, the precision oneDNN multiplies float32 at, the torch and transformers versions, the loaded model (:func:`~dsgen.generation.invariance.probed_model_key`: its class, its configuration without where it was loaded from, every parameter's name, dtype, shape and a strided sample of its values) |
| an evaluation's tokenised batches in this process | :func:`tokens_key` | how the encoder turns text into inputs (its tokenizer's serialised state and settings), the texts' key, the batch shape |

Configs are hashed through ``Config.to_dict()``, which coerces values to their field types, so
``100`` and ``100.0`` give one key. Model fingerprints come from :func:`dsgen.models.model_fingerprint`
(the content of local model files and folders, :func:`local_model_key`; the package version for embedded
models; the resolved commit for Hub ids). Every stage class carries a ``version`` (:class:`dsgen.component.Component`)
that enters its keys, so a changed algorithm invalidates what it made even in an editable install,
whose package version never changes. :func:`dsgen.artifacts.stable_hash` refuses values JSON does
not represent exactly instead of hashing their ``str()``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dsgen.artifacts import file_hash, stable_hash


def texts_key(texts: list[str] | None) -> str | None:
    """The key of a list of texts (generation inputs, a reweighter's human source, the sentences an
    encoder's statistics come from); None for no texts (a task that makes x1 from scratch)."""
    return None if texts is None else stable_hash(list(texts))


# A file's content hash, remembered for this process by everything ``stat`` says of the file (see file_key).
_FILE_KEYS: dict[tuple[str, int, int, int, int, int], str] = {}
SETTLED_SECONDS = 2.0  # a file changed less recently than this is hashed again at every call (see file_key)


def _stat_key(path: Path) -> tuple[str, int, int, int, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def file_key(path: str | Path, length: int = 16) -> str:
    """The key of a file's bytes (an NLI triplet file a trainer reads, a model's weights or code).

    The file is hashed once per process and the digest remembered by its path, size and mtime, as
    ``datasets`` remembers a local data file, and also by its inode, device and ctime: an edit in place
    that keeps the size and puts the mtime back (``os.utime``) still changes the ctime, which no user call
    can set, so the memo never serves a stale key for it. A timestamp has a granularity (a clock tick on
    ext4, seconds elsewhere), so a file edited twice within one tick could keep its ctime: a file whose
    ctime is less than :data:`SETTLED_SECONDS` old when hashing starts is therefore not remembered (hashed
    again at every call, as git's index does with "racy" entries), and neither is one that changed while
    it was read. The memo lives in this process only: nothing on disk can go stale, and a new process
    hashes each file once: 0.16 s for the 253 MB Gemma GGUF in the page cache on an idle 2-core EPYC
    (0.5-0.8 s with the machine loaded; reading it from disk takes 0.5 s), 0.1 ms for every later call.

    Args:
        path: the file.
        length: hex digits of the SHA-256 kept.
    """
    path = Path(path)
    stat = _stat_key(path)
    digest = _FILE_KEYS.get(stat)
    if digest is None:
        started = time.time_ns()
        digest = file_hash(path, 64)
        if _stat_key(path) == stat and started - stat[3] > SETTLED_SECONDS * 1e9:
            _FILE_KEYS[stat] = digest
    return digest[:length]


def _skipped(relative: Path) -> bool:
    """What in a model folder is no part of the model: hidden files and folders (a download's
    ``.cache/huggingface`` metadata, ``.git``), byte-compiled code and documentation (``README.md``)."""
    return any(part.startswith(".") or part == "__pycache__" for part in relative.parts) or \
        relative.suffix in (".pyc", ".md")


def local_model_key(path: str | Path) -> dict[str, Any]:
    """The key of a local model by its content: a file's bytes (a GGUF file), or for a folder the bytes of
    every file in it by relative path: weights, configs, tokenizer files, the chat template and custom code
    (``modeling_*.py``, ``configuration_*.py``, which ``trust_remote_code`` runs). Hidden files, byte-code and
    Markdown are left out (:func:`_skipped`). Names, mtimes and the folder's own name do not enter, so a
    copy of a model is the same model and an edit that keeps size and mtime is a new one.
    """
    path = Path(path)
    if path.is_file():
        return {"content": file_key(path)}
    files = {}
    for f in sorted(path.rglob("*")):
        relative = f.relative_to(path)
        if f.is_file() and not _skipped(relative):
            files[relative.as_posix()] = file_key(f)
    return {"content": files}


def stage_identity(component: Any) -> dict[str, Any]:
    """What identifies a stage of a run: its component's registered name, version and config dict."""
    return {"name": component.name, "version": component.version, "config": component.get_config_dict()}


def dataset_key(generator: str, version: int, config: dict[str, Any], inputs: str | None,
                spec: dict[str, Any] | None = None, model: dict[str, Any] | None = None) -> str:
    """The cache key of a generated dataset.

    Args:
        generator: the generator's registry name (a plug-in never reuses another generator's file).
        version: the generator class's version (a changed algorithm is a new dataset).
        config: the generator's coerced config (``Config.to_dict()``).
        inputs: :func:`texts_key` of the input texts x1 (None for tasks without inputs).
        spec: the task spec as used (after counter labels are turned off, if they are).
        model: the generator model's fingerprint.
    """
    return stable_hash({"generator": generator, "version": version, "config": config, "spec": spec,
                        "inputs": inputs, "model": model})


def run_key(datasets: dict[str, str | None], stages: dict[str, Any], seeds: dict[str, int | None],
            models: dict[str, Any], sources: dict[str, str | None], evaluation: dict[str, Any]) -> str:
    """The key of one run's result, computed before any training from the keys of what it consumes.

    Args:
        datasets: the dataset keys of its generation stages (``x1``, ``train``, ``dev``; computed
            from the inputs' contents first, which is cheap).
        stages: :func:`stage_identity` of every other stage (postprocessing, labeller, reweighter,
            trainer) and the method's recipe settings that shape the data.
        seeds: the run's data and training seeds.
        models: the fingerprint of every model the run loads (the encoder, a reweighter's backbone).
        sources: the keys of the texts a stage reads besides its dataset (RISE's human source).
        evaluation: the evaluation data's key (:func:`evaluation_data_key`), tasks, text convention
            and dtype.
    """
    return stable_hash({"datasets": datasets, "stages": stages, "seeds": seeds, "models": models,
                        "sources": sources, "evaluation": evaluation})


def evaluation_data_key(pairs: dict[str, list[Any]]) -> str:
    """The key of the evaluation data: per task, the sentences as encoded and the gold scores, so
    that the same pairs from any folder or Hub copy are one key, and an edited file is another."""
    return stable_hash(pairs)


def variant_key(method: dict[str, Any], plan: dict[str, Any], overrides: dict[str, Any]) -> str:
    """Names the folder of a method's results: everything the user chose except the seeds (the
    method's recipe, the resolved plan without its seeds, the command-line overrides)."""
    return stable_hash({"method": method, "plan": plan, "overrides": overrides}, length=10)


def score_key(model: dict[str, Any], prompt: str, x1: str, x2: str) -> str:
    """Key of one zero-shot judge score (the scoring model, its prompt, the pair)."""
    return stable_hash({"model": model, "prompt": prompt, "pair": [x1, x2]}, length=24)


def checkpoint_key(gguf: Path) -> str:
    """Names the folder of a GGUF file's dequantised checkpoint: its name, size and bytes (:func:`file_key`,
    so a model loaded twice in a process is hashed once)."""
    return f"{gguf.stem}-{gguf.stat().st_size}-{file_key(gguf, 12)}"


def content_key(rows: Any, length: int = 12) -> str:
    """Names an exported file by the rows it holds (a dataset folder's Parquet splits)."""
    return stable_hash(rows, length=length)


def weights_key(model: Any) -> str:
    """The key of an in-memory model's weights (a model handed to a generator rather than named): the
    bytes of every parameter and buffer, in name order."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode("utf-8"))
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def model_key(fingerprint: dict[str, Any]) -> str:
    """Keys a process-local cache of values derived from a model (an encoder's statistics)."""
    return stable_hash(fingerprint)


def request_key(endpoint: str, base_url: str, model: str, body: dict[str, Any]) -> str:
    """Names the cached response of one API request (the ``openai`` generator's ``<out>.requests/`` files):
    the endpoint kind (``completions`` / ``chat``), the server's base URL, the model and the full request
    body (prompt or messages, sampling parameters, seed). Never the API key: a key changes who pays, not
    what is asked."""
    return stable_hash({"endpoint": endpoint, "base_url": base_url, "model": model, "body": body}, length=24)


def data_fit_key(kind: str, version: int, settings: dict[str, Any], reads: dict[str, Any], models: dict[str, Any],
                 seed: int) -> str:
    """The key of a data-level fit (:mod:`dsgen.data.fits`), computed before it is made, from the keys of what
    it reads: one per dataset, shared by every run (method and training seed) that reads it.

    Args:
        kind / version: the fit's name and the version of its algorithm.
        settings: the stage's settings the fit depends on (RISE's classifier settings, not its temperature).
        reads: per thing read, its key: ``generated`` the dataset's key and the postprocessing filters applied,
            ``inputs`` / ``source`` :func:`texts_key` of the texts.
        models: the fingerprint of every model the fit loads (the classifier's backbone).
        seed: the data seed it is fitted with.
    """
    return stable_hash({"kind": kind, "version": version, "settings": settings, "reads": reads, "models": models,
                        "seed": seed})


def tokens_key(preprocessing: dict[str, Any], texts: str | None, batching: dict[str, Any]) -> str:
    """Keys a process-local cache of an evaluation's tokenised batches (:mod:`dsgen.evaluation.evaluator`):
    how the encoder turns text into model inputs (its tokenizer's serialised state, padding and truncation
    settings, maximum length), the texts' key (:func:`texts_key`) and the batch shape, so that every run of a
    comparison, whose encoders are trained copies with one tokenizer, tokenises the test sets once."""
    return stable_hash({"preprocessing": preprocessing, "texts": texts, "batching": batching})
