"""Reports built from result files, never from memory: a comparison of methods (:mod:`~dsgen.reports.comparison`:
the numbers, intervals over runs and over test pairs), a learning curve (:mod:`~dsgen.reports.curve`), the CI
regression baseline and its check (:mod:`~dsgen.reports.baseline`), and their rendering as Markdown, CSV, PNG and
rich tables (:mod:`~dsgen.reports.tables`). The papers' claims are reported by :mod:`dsgen.claims`.
"""
