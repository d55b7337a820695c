"""Data: generation inputs, STS files, pair files and DINO's postprocessing."""
