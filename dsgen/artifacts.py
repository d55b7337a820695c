"""Writing artefacts safely: atomic files, JSONL, provenance sidecars and content hashes.

Every file dsgen produces is written to a temporary file beside its target and renamed
into place, so an interrupted run never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

try:  # the TOML parser (presets, claims): the standard library's from Python 3.11, its backport on 3.10
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, a dependency there (pyproject.toml)
    import tomli as tomllib  # type: ignore[no-redef]

from dsgen.errors import DsgenError

SIDECAR_SUFFIX = ".meta.json"


def cache_dir() -> Path:
    """dsgen's own cache (dequantised checkpoints, Hub copies of the STS data): ``$DSGEN_CACHE_DIR``,
    default ``~/.cache/dsgen``."""
    return Path(os.environ.get("DSGEN_CACHE_DIR", Path.home() / ".cache" / "dsgen"))


def ensure_writable_dir(path: Path) -> Path:
    """Create ``path`` if needed; a one-line error if it cannot be written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DsgenError(f"cannot create output directory {path}: {exc.strerror}; choose another path") from None
    if not os.access(path, os.W_OK):
        raise DsgenError(f"output directory {path} is not writable; choose another path")
    return path


def check_writable_target(path: Path) -> Path:
    """Fail early, and without leaving anything behind, when ``path`` (a file or folder to be made
    later) could not be created: its nearest existing ancestor must be a folder we can write in."""
    path = Path(path).absolute()
    ancestor = path if path.is_dir() else path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DsgenError(f"cannot write {path}: {ancestor} is a file, not a folder; choose another path")
    try:
        Path(tempfile.mkdtemp(prefix=".dsgen-probe-", dir=ancestor)).rmdir()
    except OSError as exc:
        raise DsgenError(f"cannot write {path}: {ancestor} is not writable ({exc.strerror}); choose another path") from None
    return path


def check_replaceable_file(path: Path, overwrite: bool, inputs: tuple[str | Path | None, ...] = ()) -> Path:
    """Fail early, with one line, when writing the file ``path`` would replace a file dsgen did not write: one without
    dsgen's sidecar beside it (``<file>.meta.json`` naming it), or one of this command's own ``inputs``, unless
    ``overwrite`` (the user's ``--overwrite``) names it on purpose."""
    path = Path(path)
    if path.is_dir():
        raise DsgenError(f"cannot write {path}: it is a folder; give a file path")
    if overwrite or not path.exists():
        return path
    if any(i is not None and Path(i).exists() and Path(i).resolve() == path.resolve() for i in inputs):
        raise DsgenError(f"{path} is this command's own input; give another --out (or --overwrite to replace it)")
    try:
        ours = json.loads(sidecar_path(path).read_text(encoding="utf-8")).get("artifact") == path.name
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise DsgenError(f"{path} exists and dsgen did not write it (no {sidecar_path(path).name} beside it); give "
                         "another --out, or --overwrite to replace it")
    return path


def current_umask() -> int:
    """This process's umask, read without changing it (Linux: ``/proc/self/status``; elsewhere set and put back)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def staging_dir(parent: Path, prefix: str, suffix: str = "") -> Path:
    """A new folder under ``parent`` with a name no one else has (``tempfile.mkdtemp``), so that staging never
    deletes anything of anyone else's, and the mode ``mkdir`` gives under the umask (``mkdtemp`` makes it 0700),
    since it becomes the target when renamed into place."""
    stage = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent))
    os.chmod(stage, 0o777 & ~current_umask())
    return stage


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path``; rename it over ``path`` only on success. The file gets the mode
    ``open()`` gives a new file (0666 less the umask), not ``mkstemp``'s 0600."""
    path = Path(path)
    ensure_writable_dir(path.parent if str(path.parent) else Path("."))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_figure(fig: Any, path: str | Path, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG atomically and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    with atomic_open(path, "wb") as fh:
        fh.write(buf.getvalue())


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON atomically. A non-finite number (NaN, Infinity) is refused (``ValueError``) before
    anything is written: JSON has none, and a bare ``NaN`` is no score; the caller turns it into a failure (or a
    failure record names it, :func:`finite_json`)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str, allow_nan=False)
    with atomic_open(path) as fh:
        fh.write(text + "\n")


def finite_json(data: Any) -> Any:
    """``data`` with every non-finite float written as its name (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), for
    records that say why something failed (a failure record keeps the diverged training log it failed on)."""
    import math

    if isinstance(data, float) and not math.isfinite(data):
        return "NaN" if math.isnan(data) else ("Infinity" if data > 0 else "-Infinity")
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite_json(v) for v in data]
    return data


def nonfinite_fields(data: Any, where: str = "") -> list[str]:
    """The dotted names of every non-finite float in ``data`` (a result about to be written)."""
    import math

    if isinstance(data, float):
        return [] if math.isfinite(data) else [where or "value"]
    if isinstance(data, dict):
        return [f for k, v in data.items() for f in nonfinite_fields(v, f"{where}.{k}" if where else str(k))]
    if isinstance(data, (list, tuple)):
        return [f for i, v in enumerate(data) for f in nonfinite_fields(v, f"{where}[{i}]")]
    return []


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DsgenError(f"file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise DsgenError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write one JSON object a line, atomically; a non-finite number is refused (``ValueError``), nothing written."""
    with atomic_open(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    rows = []
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DsgenError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise DsgenError(f"{path}:{lineno}: expected a JSON object per line")
                rows.append(row)
    except FileNotFoundError:
        raise DsgenError(f"file not found: {path}") from None
    return rows


def _exact(obj: Any, where: str = "value") -> None:
    """Raise unless ``obj`` is made of values JSON represents exactly: None, bool, int, float, str,
    lists and tuples of them, and dicts with string keys (``{1: x}`` and ``{"1": x}`` would collide)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _exact(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"stable_hash: {where} has a key of type {type(k).__name__} ({k!r}); keys must be strings")
            _exact(v, f"{where}.{k}")
        return
    raise TypeError(f"stable_hash: {where} is a {type(obj).__name__} ({obj!r:.80}), which JSON does not represent "
                    "exactly; convert it to a plain value (a string, number, list or dict) first")


def stable_hash(obj: Any, length: int = 16) -> str:
    """A content hash of a plain JSON value (key order does not matter). A value JSON would not
    represent exactly (a path, a set, an object) raises instead of being hashed by its ``str()``."""
    _exact(obj)
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:length]


def file_hash(path: str | Path, length: int = 16) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:length]


CODE_FOLDERS = ("dsgen/", "methods/", "benchmarks/")  # an untracked file here is code a run may import


def read_git_state(root: str | Path) -> dict[str, Any]:
    """``{"commit": HEAD, "dirty": bool}`` of the checkout at ``root`` (both None outside a git checkout or
    without git). Dirty, as ``git describe --dirty`` says it, when a tracked file differs from HEAD (staged
    or not); and also when an untracked, not ignored file lies under :data:`CODE_FOLDERS` (a new module or
    method plug-in that a run may load). Untracked files elsewhere (a user's notes) do not count."""
    import subprocess

    unknown: dict[str, Any] = {"commit": None, "dirty": None}
    if not (Path(root) / ".git").exists():
        return unknown
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=all"],  # read only: never takes the index lock
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return unknown
    if head.returncode != 0 or not head.stdout.strip():
        return unknown
    dirty = None
    if status.returncode == 0:
        dirty = any(not line.startswith("??") or line[3:].strip('"').startswith(CODE_FOLDERS)
                    for line in status.stdout.splitlines() if line.strip())
    return {"commit": head.stdout.strip(), "dirty": dirty}


def git_state() -> dict[str, Any]:
    """:func:`read_git_state` of the checkout dsgen runs from, read once per process (the code a process
    imports is the code of its start)."""
    global _GIT
    if _GIT is None:
        _GIT = read_git_state(Path(__file__).resolve().parents[1])
    return _GIT


def git_commit() -> str | None:
    """The commit of the checkout dsgen runs from (None when installed from a package); whether the tree
    differs from it is :func:`git_state`'s ``dirty``."""
    return git_state()["commit"]


_GIT: dict[str, Any] | None = None


def package_versions() -> dict[str, Any]:
    """Versions of the packages that determine results, for sidecars and result files (and, run from a
    checkout, its git commit ``dsgen_git_commit`` and ``dsgen_git_dirty``: true when the code differs
    from that commit, so the commit alone does not say what ran)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("dsgen", "torch", "transformers", "sentence-transformers", "numpy", "scipy", "pandas"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    git = git_state()
    if git["commit"]:
        out["dsgen_git_commit"] = git["commit"]
        out["dsgen_git_dirty"] = git["dirty"]
    return out


CODE_PACKAGES = ("dsgen", "dsgen.methods")  # what a worker runs of dsgen's own code (benchmarks run on the driver)
SHIPPED_INSIDE = ("methods", "benchmarks")  # top-level folders a wheel ships inside dsgen/ (setup.py)
CODE_PACKAGES_OF_RESULTS = ("torch", "transformers", "sentence-transformers")  # libraries whose versions change bits
_CODE_HASH: str | None = None


def code_hash() -> str:
    """A hash of dsgen's own source: every ``*.py`` file of :data:`CODE_PACKAGES`, by its module path. Two processes
    with the same hash run the same dsgen code, whether it was installed from a wheel (where ``methods/`` lies inside
    ``dsgen/``) or a checkout (beside it), clean or edited; read once per process (the code a process imports is the
    code of its start)."""
    global _CODE_HASH
    if _CODE_HASH is None:
        import importlib.util

        files: dict[str, str] = {}
        for package in CODE_PACKAGES:
            spec = importlib.util.find_spec(package)
            for root in (spec.submodule_search_locations or []) if spec else []:
                for path in Path(root).rglob("*.py"):
                    relative = path.relative_to(root)
                    if "__pycache__" in relative.parts or (package == "dsgen" and relative.parts[0] in SHIPPED_INSIDE):
                        continue
                    files[f"{package}/{relative.as_posix()}"] = hashlib.sha256(path.read_bytes()).hexdigest()
        _CODE_HASH = stable_hash(files)
    return _CODE_HASH


def code_versions() -> dict[str, Any]:
    """What must be the same on every node that computes a comparison's artefacts: the versions of dsgen and of the
    libraries whose bits a result depends on (:data:`CODE_PACKAGES_OF_RESULTS`), and dsgen's own code
    (:func:`code_hash`: an edited checkout keeps its version and commit)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, Any] = {}
    for name in ("dsgen", *CODE_PACKAGES_OF_RESULTS):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["dsgen_code"] = code_hash()
    return out


def sidecar_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def write_sidecar(path: str | Path, **fields: Any) -> Path:
    """Write ``<path>.meta.json`` with the given fields plus package versions."""
    meta = {"artifact": Path(path).name, **fields, "versions": package_versions()}
    target = sidecar_path(path)
    write_json(target, meta)
    return target
