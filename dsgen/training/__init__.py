"""Trainers: train a sentence encoder on weighted pairs (``regression``, ``contrastive``)."""
