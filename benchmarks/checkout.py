"""Run the GPU check from a plain checkout, where dsgen is not installed (a lent GPU machine starts bare).

setup.py installs ``methods/`` and ``benchmarks/`` as ``dsgen.methods`` and ``dsgen.benchmarks`` (setuptools'
``package-dir`` mapping). In a checkout that was never installed, ``import dsgen`` finds ``dsgen/`` beside this
folder but not those two: :func:`map_checkout` adds the same mapping for this process (a finder on
``sys.meta_path``; a no-op where dsgen is installed). Imported as a pytest plugin (``pytest -p
benchmarks.checkout``) it does the same for a test run, so ``pytest -m gpu`` collects in a bare checkout too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"dsgen.methods": ROOT / "methods", "dsgen.benchmarks": ROOT / "benchmarks"}  # setup.py's PACKAGE_DIR


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``dsgen.methods`` and ``dsgen.benchmarks`` in their checkout folders; their submodules are then found
    through the packages' ``__path__`` as usual."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        folder = MAPPED.get(name)
        if folder is None or not (folder / "__init__.py").is_file():
            return None
        return importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


def map_checkout() -> bool:
    """Map ``dsgen.methods`` / ``dsgen.benchmarks`` to this checkout's folders when dsgen cannot import them (not
    installed); return whether the mapping was added."""
    if any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
        return True
    try:
        importlib.import_module("dsgen.methods")
        importlib.import_module("dsgen.benchmarks")
        return False
    except ModuleNotFoundError:
        sys.meta_path.insert(0, _CheckoutFinder())
        importlib.invalidate_caches()
        return True


map_checkout()
