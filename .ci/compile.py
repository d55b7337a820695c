"""Byte-compile a virtual environment on every core, after pip installed it with ``--no-compile`` (pip compiles each
package as it installs it, on one core). Run with the environment's own Python (the Makefile's ``$(PY)``):

    python .ci/compile.py                     all of site-packages but the packages' test suites and transformers'
                                              per-architecture code (``make install-dev``: the tests import more)
    python .ci/compile.py --only LIST         only the package folders LIST names, one per line relative to
                                              site-packages (``make install``: what ``make run`` imports)
    python .ci/compile.py --record LIST -- ARGS...
                                              run ``dsgen ARGS...`` in this process and write to LIST the folders of
                                              site-packages it imported from (``make run-imports``)

A module left uncompiled is compiled on first import (and its ``.pyc`` written, unless PYTHONDONTWRITEBYTECODE is set),
so a list that lags behind a new dependency costs time, never correctness. Compiled files are the same either way
(``compileall``'s default timestamp check), so a later ``make install-dev`` only compiles the rest.
"""

from __future__ import annotations

import compileall
import functools
import os
import re
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# test suites, and transformers' per-architecture modules but their __init__ and configuration modules (which the auto
# classes import) and auto/ itself: a run imports a handful of these, compiled on first import
SKIP = re.compile(r"/(tests?/|transformers/models/(?!auto/)[^/]+/(?!__init__|configuration_))")


def site_packages() -> list[Path]:
    """This environment's site-packages folders (purelib and platlib, once each)."""
    paths = sysconfig.get_paths()
    return sorted({Path(paths["purelib"]), Path(paths["platlib"])})


def compile_files(files: list[str]) -> None:
    """Compile ``files`` on every core. A file that does not compile (some packages ship such files: pip installs them
    too) is left to fail where it is imported, as pip leaves it."""
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(functools.partial(compileall.compile_file, quiet=2), files, chunksize=64))


def listed_files(listing: Path) -> list[str]:
    """The ``.py`` files directly in the folders ``listing`` names (relative to site-packages; ``#`` comments)."""
    folders = [line.split("#")[0].strip() for line in listing.read_text().splitlines()]
    files = []
    for root in site_packages():
        for folder in filter(None, folders):
            here = root / folder
            if here.is_dir():
                files += sorted(str(p) for p in here.glob("*.py"))
    return files


def record(listing: Path, args: list[str]) -> int:
    """Run ``dsgen args`` here, then write the site-packages folders of every module it imported to ``listing``."""
    from dsgen.cli import main

    roots = site_packages()
    sys.argv = ["dsgen", *args]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    if code:
        print(f"dsgen {' '.join(args)} failed (exit {code}); {listing} left as it was", file=sys.stderr)
        return code
    folders = set()
    for module in list(sys.modules.values()):
        path = Path(getattr(module, "__file__", None) or "")
        if path.suffix != ".py":
            continue
        for root in roots:
            if path.is_relative_to(root):
                folders.add(path.parent.relative_to(root).as_posix())
    shown = " ".join(args[:args.index("--out")] if "--out" in args else args)
    header = (f"# site-packages folders `dsgen {shown}` imports from: `make install` compiles these (the rest "
              f"compile on first import).\n# Written by `make run-imports` (.ci/compile.py --record); "
              f"{len(folders)} folders.\n")
    tmp = listing.with_name(listing.name + ".tmp")
    tmp.write_text(header + "".join(f"{f}\n" for f in sorted(folders)))
    os.replace(tmp, listing)
    print(f"wrote {listing}: {len(folders)} folders")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"] and len(argv) >= 3 and argv[2] == "--":
        return record(Path(argv[1]), argv[3:])
    if argv[:1] == ["--only"] and len(argv) == 2:
        if Path(argv[1]).is_file():
            compile_files(listed_files(Path(argv[1])))
            return 0
        print(f"{argv[1]} not found (`make run-imports` writes it): compiling the whole environment", file=sys.stderr)
        argv = []
    if not argv:
        for root in site_packages():
            compileall.compile_dir(str(root), quiet=2, workers=0, rx=SKIP)
        return 0
    print("usage: compile.py [--only LIST | --record LIST -- DSGEN-ARGS...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
