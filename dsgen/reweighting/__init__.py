"""Reweighters: a weight in [0, 1] for every pair (RISE's SDI importance, its ablations, GenSE's filter)."""
