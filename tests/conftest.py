"""Shared fixtures: tiny randomly initialised causal LMs with a character tokenizer built here."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import string
import tempfile
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sts"

# `datasets` caches what it loads under ~/.cache, keyed by names and patterns rather than contents:
# the tests (and the dsgen processes they start) get a cache of their own, empty at every session, and removed when
# the process that made it ends (not a fork of it: a command forked by the tests' command server runs exit handlers)
os.environ["HF_DATASETS_CACHE"] = _DATASETS_CACHE = tempfile.mkdtemp(prefix="dsgen-tests-datasets-")
_MADE_BY = os.getpid()
atexit.register(lambda: os.getpid() == _MADE_BY and shutil.rmtree(_DATASETS_CACHE, ignore_errors=True))


# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadfile`), scheduled by module: a module's
# tests stay together on one worker, so a module-scoped fixture (a paper-preset comparison, a Ray cluster) is made once.
# Modules sharing a costly session fixture or a machine-wide resource share a unit (both Ray clusters on one worker;
# the one full all-MiniLM-L6-v2 evaluation read by the evaluation and the export tests made once), and the units that
# take longest (`--durations`) start first, so that neither worker is left with a long one at the end. (xdist's own
# `--dist loadgroup` cannot do it with pytest 9: a test's group no longer reaches the scheduler through its node id.)
SHARED_UNITS = {"tests/scheduling/test_ray_scheduler.py": "ray", "tests/generation/test_ray_backend.py": "ray",
                "tests/evaluation/test_sts_eval.py": "minilm-mteb", "tests/test_exports.py": "minilm-mteb"}
LONGEST_FIRST = ("ray", "minilm-mteb", "tests/generation/test_openai_api.py", "tests/test_paper_preset.py",
                 "tests/generation/test_other_kernels.py", "tests/test_cli.py", "tests/generation/test_debiased.py",
                 "tests/test_runner.py", "tests/test_install.py")


def _unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``: whole modules (``SHARED_UNITS`` joined) to a worker, the longest first."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            rank = {u: i for i, u in enumerate(LONGEST_FIRST)}
            self.workqueue.move_to_end(min(self.workqueue, key=lambda u: rank.get(u, len(rank))), last=False)
            super()._assign_work_unit(node)

    return ByModule(config, log)


if os.environ.get("PYTEST_XDIST_WORKER"):
    # an xdist worker starts with COLUMNS=80 and LINES=24 in its environment, which the commands the tests run would
    # take as their width; the tests set the width where it matters, and dsgen's log width holds elsewhere
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run only where CUDA is present; elsewhere they are skipped with the reason."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def build_char_tokenizer():
    """A character tokenizer plus a few multi-character tokens ('."' carries text before a quote)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = list(string.ascii_letters + string.digits + " .,!?'-:\n\"\u201c\u201d")
    specials = ["<pad>", "<eos>"]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    merges = [(".", '"'), ("t", "h"), ("th", "e")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", padding_side="left")


def build_tiny_lm(seed: int = 0, extra_vocab: int = 0, arch: str = "llama", **config):
    """A tiny random causal LM over the character tokenizer; ``extra_vocab`` pads the vocabulary
    beyond the tokenizer, ``arch`` picks llama, mistral (sliding window) or gpt2 (absolute positions)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    common = dict(vocab_size=len(tok) + extra_vocab, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    if arch == "gpt2":
        cfg = GPT2Config(**{"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256, **common, **config})
        return GPT2LMHeadModel(cfg).eval(), tok
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256)
    if arch == "mistral":
        return MistralForCausalLM(MistralConfig(**sizes, **common, **config)).eval(), tok
    return LlamaForCausalLM(LlamaConfig(**sizes, **common, **config)).eval(), tok


@pytest.fixture(scope="session")
def tiny_lm():
    from dsgen.models import LoadedLM

    model, tok = build_tiny_lm()
    return LoadedLM(model, tok, "tiny-llama", "test", 0.0, False)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory, tiny_lm):
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_lm.model.save_pretrained(path)
    tiny_lm.tokenizer.save_pretrained(path)
    return path


def in_ci() -> bool:
    """Whether the tests run in CI (``CI`` set to anything but empty, 0 or false), where nothing a test
    needs may be missing: what skips on a developer machine fails there."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def missing(message: str, ci: str) -> None:
    """Skip the test with ``message`` on a developer machine; fail it in CI, saying why (``ci``)."""
    if in_ci():
        pytest.fail(f"{message} ({ci})", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require(module: str, extra: str | None = None):
    """``import module`` for a test that needs an optional extra (``dsgen[extra]``; None: a dependency of
    dsgen itself): the module, or the test skipped on a developer machine without it and failed in CI,
    where the extras are installed and a missing one must not pass unnoticed. Works at module level too.
    A module that is there but fails to import raises, as with ``pytest.importorskip``: a broken install
    is an error everywhere."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        install = f"pip install 'dsgen[{extra}]'" if extra else "pip install dsgen"
        missing(f"needs '{module}' ({exc}); {install}", "CI installs every extra")


@pytest.fixture(scope="session")
def sts_data_dir():
    """The shared STS data. Missing: the tests that need it skip on a developer machine, and fail
    in CI (``CI`` set), where a missing data pack must not pass unnoticed."""
    path = Path(os.environ.get("DSGEN_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        missing(f"shared STS data not found at {path}; set DSGEN_DATA_DIR", "CI must have the data pack")
    return path


@pytest.fixture(scope="session")
def minilm_mteb_result(tmp_path_factory, sts_data_dir):
    """``dsgen eval minilm-l6 --tasks mteb --json``'s result file, made once for the session: the evaluation's
    match with MTEB's published numbers and the MTEB export of it read the same file (one full evaluation). The
    command is a fork of the tests' command server (tests/cli_process.py), which the worker's later commands reuse,
    rather than a new interpreter of its own (8 s of imports on 2 cores)."""
    from tests.cli_process import run_dsgen

    path = tmp_path_factory.mktemp("minilm-eval") / "minilm-l6.json"
    proc = run_dsgen(["eval", "minilm-l6", "--tasks", "mteb", "--device", "cpu", "--json", path],
                     env={"DSGEN_DATA_DIR": str(sts_data_dir)})
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory):
    """A 2-layer randomly initialised BERT with all-MiniLM-L6-v2's tokenizer, saved as a plain
    transformer (sentence-transformers adds mean pooling when loading it)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from dsgen.models import encoder_path

    tok = AutoTokenizer.from_pretrained(encoder_path("minilm-l6"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    path = tmp_path_factory.mktemp("tiny-bert")
    BertModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path
