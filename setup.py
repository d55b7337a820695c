"""Which packages dsgen installs, found by setuptools' own discovery; everything else is in pyproject.toml.

pyproject.toml's ``[tool.setuptools.packages.find]`` can only name a folder's packages after the folder, so it cannot
find ``methods/`` as ``dsgen.methods``; a hand-kept ``packages`` list could, and missed ``dsgen.scheduling`` (a
wheel without it fails every ``dsgen compare``). So the discovery is here, in setup.py, with the folder mapping
beside it:

- every folder under ``dsgen/`` is a package (namespace discovery, so a new ``dsgen/<name>/`` ships without an edit,
  ``__init__.py`` or not, and data folders such as ``dsgen/claims/papers/`` are packages of their own rather than
  setuptools' "importable but not a package" warnings);
- the top-level ``methods/`` and ``benchmarks/`` ship inside the dsgen namespace as ``dsgen.methods`` and
  ``dsgen.benchmarks`` (README, *What is here*), their subfolders with them.

Data files (``[tool.setuptools.package-data]``) are declared in pyproject.toml; tests/test_install.py builds the wheel,
checks that it holds every file of these folders, and runs ``dsgen`` from it.
"""

from setuptools import find_namespace_packages, setup

# top-level folders installed under another name: setuptools' package-dir mapping
PACKAGE_DIR = {"dsgen.methods": "methods", "dsgen.benchmarks": "benchmarks"}
NOT_PACKAGES = ["__pycache__", "*.__pycache__"]


def discover() -> list[str]:
    found = find_namespace_packages(include=["dsgen", "dsgen.*"], exclude=NOT_PACKAGES)
    for name, folder in PACKAGE_DIR.items():
        found += [name, *(f"{name}.{sub}" for sub in find_namespace_packages(where=folder, exclude=NOT_PACKAGES))]
    # a folder whose name is no Python identifier (e.g. ``my-notes``) cannot be imported: not a package
    return sorted(p for p in found if all(part.isidentifier() for part in p.split(".")))


setup(packages=discover(), package_dir=PACKAGE_DIR)
