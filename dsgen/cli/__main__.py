"""``python -m dsgen.cli``: the ``dsgen`` command."""

from dsgen.cli import main

main()
