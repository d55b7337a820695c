"""Which batch-invariant numerics this machine gives a model: probed, not assumed.

The decode loop shares rows between samples, computes shared instruction prefixes once and
moves rows between slots; each of these changes no output only if a sequence's logits are the
same bits whatever it is batched with (:mod:`dsgen.generation.decode_step`). The prefill is exact by
construction (:mod:`dsgen.generation.prefill_step`: fixed shapes; its last row block cut to the probed
counts where they allow); a decode step rests on the CPU's kernels: the row counts at which a matrix
multiply gives each row the same bits, and whether a softmax's sum depends on the row's width. Those
differ between CPUs (an AVX2 CPU and an AVX-512 one sum a softmax in lanes of 8 and 16; MKL on an Intel
Xeon gives a row the bits of a large batch at fewer row counts than on an AMD EPYC), so :func:`numerics`
probes them for the model, on the model itself, for every path that relies on them, and checks the
prefill as well:

- **prefill**: prompts fed whole, in different batches, and fed after their own cached prefix
  (the extend-after-past path of :class:`~dsgen.generation.batch.PromptBank`) give the same logits
  and keys;
- **decode**: a row's logits after one-token steps are the same bits in any batch, slot and row
  count (a step in blocks of the invariant counts), and with one thread (a Ray actor's share of two
  cores) as with every core. The invariant row counts themselves depend on the thread count (MKL on a
  2-core AMD EPYC: every count from 4 on at one thread, 4, 8 and 12 on at two), so the probe's answer
  belongs to the thread count it ran at, and a process is given the answer for the count it computes with.

The probe tries PyTorch's fused softmax first (the bits of earlier releases on AVX2 CPUs), then
the exact-sum softmax, which is invariant by construction
(:func:`~dsgen.generation.decode_step.exact_softmax`). Where neither passes, the decoder stops
sharing rows and prefixes (``shared`` False): its outputs are then still the same bytes for the
same seed, batch size and machine, but no longer equal to a one-row-at-a-time schedule's. The
choice is recorded in every generated dataset's sidecar (``numerics``).

The probe sits above the batch: it runs a :class:`~dsgen.generation.batch.PromptBank` and an
:class:`~dsgen.generation.batch.ActiveBatch` with each candidate. The record it returns
(:class:`~dsgen.generation.probed.Numerics`) and the process's memory of it per model live below
the batch (:mod:`dsgen.generation.probed`); the decoder asks :func:`numerics` before it builds a
batch and hands the answer down.

Probing costs about 7 s for SmolLM2-135M on an AMD AVX-512 CPU (both softmaxes tried; 21 s on the Xeon,
where every check failed before the prefill was exact) and a fraction of a second for the tests' tiny
models; its answer is stored under ``$DSGEN_CACHE_DIR/numerics/`` keyed by the CPU, the thread count, the
torch and transformers versions and the model, wherever it was loaded from (:func:`probe_key`), so it runs
once per kind of machine, thread count and model, not once per process.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from dsgen.generation.batch import ActiveBatch, PromptBank
from dsgen.generation.kernels import model_kernels
from dsgen.generation.probed import ATTENTIONS, Numerics, known, remember


PROBE_VERSION = 10  # enters the key of every stored probe: bumped when the probe or the paths it checks change


def numerics(model: Any) -> Numerics:
    """The numerics to use for ``model`` on this machine (probed on first use, then remembered for
    the model's lifetime: :mod:`dsgen.generation.probed`, and stored on disk under :func:`probe_key`, so
    another process on the same kind of machine reads it instead of probing). A non-CPU model is not
    probed: it gets the fused softmax and no row counts, every step one block of its rows, unpadded (a GPU's
    kernels are another story; see the README's *GPU*). Within :func:`~dsgen.generation.probed.assume`, the
    assumed numerics, unprobed."""
    found = known(model)
    if found is None:
        found = remember(model, stored_probe(model))
    return found


@functools.lru_cache(maxsize=1)  # MKL picks its path once, when the process starts
def mkl_code_path() -> str:
    """The code path MKL dispatches its kernels to, as MKL reports it (``mkl_get_version``'s processor field: on an
    Intel Xeon without bfloat16 "Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) with support of Intel(R)
    Deep Learning Boost (Intel(R) DL Boost)", on an AMD EPYC "Intel(R) Architecture processors"); "" where PyTorch
    was built without MKL or MKL cannot be asked. Which path runs decides which row counts give a row the same bits,
    whatever the CPU's flags say (``MKL_ENABLE_INSTRUCTIONS`` caps it; MKL takes its Intel paths on Intel CPUs only)."""
    import ctypes
    import glob
    import os

    import torch

    class Version(ctypes.Structure):  # MKLVersion (mkl_types.h)
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("update", ctypes.c_int),
                    ("status", ctypes.c_char_p), ("build", ctypes.c_char_p), ("processor", ctypes.c_char_p),
                    ("platform", ctypes.c_char_p)]

    if not torch.backends.mkl.is_available():
        return ""
    # PyTorch links MKL into libtorch_cpu (its symbols exported); a build against a shared MKL finds it globally
    libraries = [None, *sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.*")))]
    for library in libraries:
        try:
            get_version = ctypes.CDLL(library).mkl_serv_get_version
        except (OSError, AttributeError):
            continue
        version = Version()
        get_version(ctypes.byref(version))
        return (version.processor or b"").decode(errors="replace")
    return ""


def cpu_identity() -> dict[str, Any]:
    """What tells two CPUs' kernels apart: PyTorch's capability (which ``ATEN_CPU_CAPABILITY`` caps), the
    vendor, model name and vector flags (an Intel and an AMD AVX-512 CPU run different MKL kernels), the
    instruction cap MKL was given (``MKL_ENABLE_INSTRUCTIONS``) and the code path MKL reports it runs
    (:func:`mkl_code_path`), and the instruction cap oneDNN was given (``ONEDNN_MAX_CPU_ISA``, or its older name
    ``DNNL_MAX_CPU_ISA``), whose multiply the linear layers run where the probe chose it."""
    import os
    import platform

    import torch

    vendor = model = ""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif name == "model name" and not model:
                    model = value.strip()
                elif name == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        model = platform.processor()
    vector = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4")))
    return {"capability": torch.backends.cpu.get_cpu_capability(), "vendor": vendor, "model": model, "flags": vector,
            "mkl_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS", ""), "mkl": mkl_code_path(),
            "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA", ""),
            "machine": platform.machine()}


def probed_model_key(model: Any) -> str:
    """A key of the model as the probe sees it: its class, configuration, and every parameter's name, dtype,
    shape and a strided sample of its values (at most 4,096 per tensor: milliseconds, where hashing the
    whole of SmolLM2-135M's weights would cost each process about a second). Not where it was loaded from:
    the configuration's bookkeeping (``_BOOKKEEPING``: the folder, and what saving fills in) is left out, so the
    same model in another folder reads the same stored probe."""
    import hashlib
    import json

    import torch

    digest = hashlib.sha256()
    cfg = getattr(model, "config", None)
    if hasattr(cfg, "to_json_string"):
        described = json.dumps(_without_bookkeeping(json.loads(cfg.to_json_string(use_diff=False))), sort_keys=True)
    else:
        described = repr(cfg)
    digest.update(f"{type(model).__module__}.{type(model).__qualname__}\n{described}".encode())
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            flat = tensor.detach().reshape(-1)
            sample = flat[::max(1, flat.numel() // 4096)].cpu().contiguous()
            digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
            digest.update(sample.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:20]


# configuration fields that loading or saving set and that say nothing of what the model computes: its folder, its
# class names (the class is keyed itself), its dtype (every weight's dtype is keyed itself) and the library version
# (keyed by probe_key)
_BOOKKEEPING = ("_name_or_path", "architectures", "dtype", "torch_dtype", "transformers_version")


def _without_bookkeeping(config: Any) -> Any:
    """A configuration's dict without ``_BOOKKEEPING``'s fields, at any depth (a text config inside a
    multimodal one)."""
    if isinstance(config, dict):
        return {k: _without_bookkeeping(v) for k, v in config.items() if k not in _BOOKKEEPING}
    return config


def onednn_fp32_precision() -> str:
    """The precision oneDNN's float32 matrix multiply runs at in this process: ``torch.backends.mkldnn.matmul``'s
    ``fp32_precision``, else what it inherits (``torch.backends.mkldnn``, then ``torch.backends``), ``"ieee"`` where
    none is set (``torch.set_float32_matmul_precision("medium")`` sets ``"bf16"``, ``"highest"`` sets ``"ieee"``).
    An older torch without that interface: the one setting it has, ``torch.get_float32_matmul_precision()``."""
    import torch

    backends = torch.backends
    mkldnn = getattr(backends, "mkldnn", None)
    holders = [h for h in (getattr(mkldnn, "matmul", None), mkldnn, backends) if hasattr(h, "fp32_precision")]
    if not holders:
        return torch.get_float32_matmul_precision()
    for holder in holders:
        value = str(holder.fp32_precision)
        if value != "none":
            return value
    return "ieee"


def probe_key(model: Any) -> str:
    """The key a probe of ``model`` is stored under: the probe's version, the CPU (:func:`cpu_identity`), the
    thread count, the precision oneDNN multiplies float32 at here (:func:`onednn_fp32_precision`: at ``"bf16"`` it may
    round otherwise, at other invariant counts), the torch and transformers versions and the model
    (:func:`probed_model_key`)."""
    import torch
    import transformers

    from dsgen.artifacts import stable_hash

    return stable_hash({"probe": PROBE_VERSION, "cpu": cpu_identity(), "threads": torch.get_num_threads(),
                        "onednn_fp32": onednn_fp32_precision(),
                        "torch": torch.__version__, "transformers": transformers.__version__,
                        "model": probed_model_key(model)}, length=24)


def stored_probe(model: Any) -> Numerics:
    """:func:`probe` of ``model``, read from ``$DSGEN_CACHE_DIR/numerics/<probe_key>.json`` when a process
    on the same kind of machine probed it before, else probed and written there (atomically; a file that
    cannot be read or written only costs a probe). A non-CPU model is not probed, so not stored."""
    import json
    import os
    import tempfile

    from dsgen.artifacts import cache_dir

    if next(model.parameters()).device.type != "cpu":
        return probe(model)
    path = cache_dir() / "numerics" / f"{probe_key(model)}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Numerics.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = probe(model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probe-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(found.to_dict(), f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass
    return found


def probe(model: Any) -> Numerics:
    """Probe ``model`` on this machine (see the module docstring) and return what to use."""
    import torch

    device = next(model.parameters()).device
    if device.type != "cpu":
        # nothing probed: this CPU's row counts say nothing of the device's kernels (and depend on the host's thread
        # count, which a GPU actor and a local run need not share), so every step is one block of its own rows
        return Numerics(cpu=device.type)
    cpu = torch.backends.cpu.get_cpu_capability()
    kernels = model_kernels(model)
    counts = kernels.counts
    # no count at all: nothing to share rows in (the prefill runs one prompt per pass); the softmaxes are not tried
    failed: list[str] = [] if counts else ["row counts: none gives a row the bits of a large batch wherever it sits"]
    threads = True
    texts = [" ".join(map(str, p)) for p in _prompts(model)]
    for attention in ATTENTIONS if counts else ATTENTIONS[-1:]:
        candidate = Numerics(attention, kernels, True, True, cpu)
        with torch.inference_mode(), _without_hooks(model):
            bank, failures = _prefill_failures(model, texts, candidate)
            failures = failures or _decode_failures(model, bank, candidate)
            threads = _thread_invariant(model, bank, texts, candidate)  # checked either way: the sidecar says it
        if not failures and counts:
            return Numerics(attention, kernels, True, threads, cpu,
                            tuple(failed) + (() if threads else (f"{attention}: threads",)))
        failed += [f"{attention}: {f}" for f in failures]
    return Numerics(ATTENTIONS[-1], kernels, False, threads, cpu, tuple(failed))


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
          "_forward_hooks_always_called")


@contextlib.contextmanager
def _without_hooks(model: Any) -> Iterator[None]:
    """Within the block, the model's modules run without their forward hooks: the probe measures the
    model's kernels, and a hook (a logits processor, a call counter) must not see its calls."""
    import collections

    saved = [(m, name, getattr(m, name)) for m in model.modules() for name in _HOOKS if getattr(m, name, None)]
    for m, name, hooks in saved:
        setattr(m, name, collections.OrderedDict())
    try:
        yield
    finally:
        for m, name, hooks in saved:
            setattr(m, name, hooks)


class _IdTokenizer:
    """A stand-in tokenizer whose texts are token ids written out ("5 17 9"): the probe runs the
    real model on seeded ids through the same code paths as prompts, without the real tokenizer."""

    pad_token_id = 0
    eos_token_id = None

    def __call__(self, texts: Sequence[str], add_special_tokens: bool = True) -> dict[str, list[list[int]]]:
        return {"input_ids": [[int(t) for t in text.split()] for text in texts]}


def _prompts(model: Any, seed: int = 0) -> list[list[int]]:
    """Seeded token ids shaped like a chunk's prompts: instruction heads of 6 and 18 tokens (DINO's
    x1 and x2 instructions) shared by prompts whose own tails are 2 to 40 tokens long (the inputs),
    a few prompts that share nothing (widths on both sides of 8 and 16 vector lanes, and up to
    58 key columns), then ``MORE_PROMPTS`` short ones (so that prompts sit at every row of an output head's
    block when all are prefilled at once)."""
    import torch

    vocab = int(model.get_output_embeddings().weight.shape[0])
    gen = torch.Generator().manual_seed(seed)
    ids = lambda n: torch.randint(1, vocab, (n,), generator=gen).tolist()  # noqa: E731
    heads = [ids(6), ids(18)]
    out = [heads[i % 2] + ids(n) for i, n in enumerate((2, 3, 5, 9, 13, 40))]
    return out + [ids(n) for n in (3, 7, 13, 50)] + [ids(2 + i % 4) for i in range(MORE_PROMPTS)]


MORE_PROMPTS = 30  # short prompts after those: a batch of all of them fills a prefill's output head past 32 rows


def _prefill_failures(model: Any, texts: Sequence[str], candidate: Numerics) -> tuple[PromptBank, list[str]]:
    """The prompt bank's property: a prompt's logits and keys are the same bits with shared prefixes
    (fed after its cached prefix) as whole, and in any subset of prompts. Returns the bank too."""
    import torch

    shared = PromptBank(model, _IdTokenizer(), texts, batch_size=4, share_prefixes=True, numerics=candidate)
    whole = PromptBank(model, _IdTokenizer(), texts, batch_size=4, share_prefixes=False, numerics=candidate)
    together = PromptBank(model, _IdTokenizer(), texts, batch_size=len(texts), share_prefixes=True,
                          numerics=candidate)
    failed = []
    same = torch.equal(shared.logits, whole.logits) and all(
        torch.equal(a, b) for a, b in zip(shared.keys + shared.values, whole.keys + whole.values))
    if not same:
        failed.append("prefill after a cached prefix")
    if not (torch.equal(together.logits, shared.logits)
            and all(torch.equal(a, b) for a, b in zip(together.keys + together.values, shared.keys + shared.values))):
        failed.append(f"prefill of all {len(texts)} prompts in one batch")
    for subset in ([0, 2, 5], [1, 3, 4, 6, 7]):
        part = PromptBank(model, _IdTokenizer(), [texts[i] for i in subset], batch_size=32, share_prefixes=True,
                          numerics=candidate)
        w = part.width
        if not (torch.equal(part.logits, shared.logits[subset])
                and all(torch.equal(a, b[subset, :, b.shape[2] - w:])
                        for a, b in zip(part.keys + part.values, shared.keys + shared.values))):
            failed.append(f"prefill of prompts {subset} in another batch")
    return shared, failed


def _decode_logits(model: Any, bank: PromptBank, rows: Sequence[int], steps: Sequence[Sequence[int]],
                   candidate: Numerics) -> Any:
    """Logits after feeding ``steps`` (one token per row each) to the prompts ``rows`` of ``bank``,
    decoded together. Within a decode call every row writes the same column, so rows keep their
    alignment to each other whatever the batch; the bank (its width) is the call's."""
    import torch

    prompts = list(bank.index)
    batch = ActiveBatch(model, torch.device("cpu"), max_rows=len(rows), max_columns=bank.width + len(steps),
                        first_column=bank.width, numerics=candidate)
    batch.admit(bank, [prompts[r % len(prompts)] for r in rows])
    for tokens in steps:
        batch.advance(torch.tensor([tokens[r] for r in rows]))
    return batch.logits[:len(rows)].clone()


def _steps(model: Any, rows: int) -> list[list[int]]:
    vocab = int(model.get_output_embeddings().weight.shape[0])
    return [[1 + (7 * i + 3 * s) % (vocab - 1) for i in range(rows)] for s in range(2)]


def _decode_failures(model: Any, bank: PromptBank, candidate: Numerics, rows: int = 80) -> list[str]:
    """A row's logits after two decode steps are the same bits in any batch, slot and row count
    (small steps padded to a probed count, and steps beyond the counts probed one by one)."""
    import torch

    steps = _steps(model, rows)
    full = _decode_logits(model, bank, range(rows), steps, candidate)
    for lo, hi in ((0, 1), (3, 6), (2, 15), (9, 80)):
        if not torch.equal(_decode_logits(model, bank, range(lo, hi), steps, candidate), full[lo:hi]):
            return [f"decode rows {lo}-{hi} of {rows}"]
    return []


def _thread_invariant(model: Any, bank: PromptBank, texts: Sequence[str], candidate: Numerics, rows: int = 13) -> bool:
    """The current thread count computes the bits that one thread (a Ray actor's share) and every core (a local
    run) do, prefill and decode, each with the row counts probed at its own thread count (what a process
    running at that count is given)."""
    import dataclasses
    import os

    import torch

    threads = torch.get_num_threads()
    steps = _steps(model, rows)
    many = _decode_logits(model, bank, range(rows), steps, candidate)
    for other in sorted({1, len(os.sched_getaffinity(0))} - {threads}):
        try:
            torch.set_num_threads(other)
            there = dataclasses.replace(candidate, kernels=model_kernels(model))
            other_bank = PromptBank(model, _IdTokenizer(), texts, batch_size=8, numerics=there)
            same = (torch.equal(other_bank.logits, bank.logits)
                    and torch.equal(_decode_logits(model, other_bank, range(rows), steps, there), many))
        finally:
            torch.set_num_threads(threads)
        if not same:
            return False
    return True


__all__ = ["numerics", "probe", "stored_probe", "probe_key", "onednn_fp32_precision", "probed_model_key",
           "cpu_identity", "mkl_code_path", "PROBE_VERSION"]
