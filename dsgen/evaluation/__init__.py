"""Evaluation: STS tasks with validated metadata, a cached-embedding evaluator, result files and tables."""
