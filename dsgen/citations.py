"""BibTeX of the papers whose components dsgen reproduces (a component's ``citation``; model and
dataset cards carry them)."""

DINO = """@inproceedings{schick-schutze-2021-generating,
  title = {Generating Datasets with Pretrained Language Models},
  author = {Schick, Timo and Sch{\\"u}tze, Hinrich},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  year = {2021},
  pages = {6943--6951},
  url = {https://aclanthology.org/2021.emnlp-main.555}
}"""

SELF_DEBIASING = """@article{schick-etal-2021-self,
  title = {Self-Diagnosis and Self-Debiasing: A Proposal for Reducing Corpus-Based Bias in {NLP}},
  author = {Schick, Timo and Udupa, Sahana and Sch{\\"u}tze, Hinrich},
  journal = {Transactions of the Association for Computational Linguistics},
  volume = {9},
  year = {2021},
  pages = {1408--1424}
}"""

RISE = """@inproceedings{kim-etal-2022-reweighting,
  title = {Reweighting Strategy Based on Synthetic Data Identification for Sentence Similarity},
  author = {Kim, Taehee and Park, ChaeHun and Hong, Jimin and Dua, Radhika and Choi, Edward and Choo, Jaegul},
  booktitle = {Proceedings of the 29th International Conference on Computational Linguistics},
  year = {2022},
  pages = {4853--4863},
  url = {https://aclanthology.org/2022.coling-1.429}
}"""

GENSE = """@inproceedings{chen-etal-2022-generate,
  title = {Generate, Discriminate and Contrast: A Semi-Supervised Sentence Representation Learning Framework},
  author = {Chen, Yiming and Zhang, Yan and Wang, Bin and Liu, Zuozhu and Li, Haizhou},
  booktitle = {Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing},
  year = {2022},
  pages = {8150--8161},
  url = {https://aclanthology.org/2022.emnlp-main.558}
}"""

SBERT = """@inproceedings{reimers-gurevych-2019-sentence,
  title = {Sentence-{BERT}: Sentence Embeddings using {S}iamese {BERT}-Networks},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing},
  year = {2019},
  pages = {3982--3992},
  url = {https://aclanthology.org/D19-1410}
}"""

STSB = """@inproceedings{cer-etal-2017-semeval,
  title = {{S}em{E}val-2017 Task 1: Semantic Textual Similarity Multilingual and Crosslingual Focused Evaluation},
  author = {Cer, Daniel and Diab, Mona and Agirre, Eneko and Lopez-Gazpio, I{\\~n}igo and Specia, Lucia},
  booktitle = {Proceedings of the 11th International Workshop on Semantic Evaluation ({S}em{E}val-2017)},
  year = {2017},
  pages = {1--14}
}"""
