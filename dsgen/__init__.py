"""dsgen: generate labelled sentence-pair datasets with language models and measure their worth.

The package imports nothing heavy at the top level so that ``dsgen --help`` answers at once;
torch, transformers and sentence-transformers are imported by the modules that need them.
"""

__version__ = "0.1.0"
