"""The ``paper`` preset: its plans show the papers' settings, and its whole path runs end to end on
tiny random models of exactly the papers' architectures (GPT-2 with absolute positions and no pad
token, RoBERTa with its position offset, BERT uncased, T5), each with a real tokenizer of its family
trained here on STS benchmark sentences. The closest thing to a GPU run this machine allows."""

import json
import subprocess
import sys

import pytest

from dsgen.planning import plan_run
from dsgen.presets import load_preset


def plan_of(method):
    out = subprocess.run([sys.executable, "-m", "dsgen.cli", "plan", method, "--preset", "paper", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["plan"]


def test_the_paper_plans_show_the_papers_settings():
    dino, rise, gense = plan_of("dino"), plan_of("rise"), plan_of("gense")
    # the input set: DINO's 11,498 STSb train sentences with duplicates; RISE a shuffled set of at most 10k
    assert dino["inputs"] == "stsb-train" and dino["max_inputs"] is None and dino["method"]["input_sample"] is None
    assert rise["method"]["input_sample"] == 10_000
    # DINO's and RISE's trainer: sentence-transformers 0.4's AdamW (no bias correction, eps 1e-6), 128 tokens
    for plan in (dino, rise):
        assert plan["trainer"]["optimizer"] == "adamw-uncorrected" and plan["trainer"]["max_seq_length"] == 128
    # RISE's data protocol: the whole train file, a dev set generated apart from STSb validation sentences
    assert rise["dev_inputs"] == "stsb-validation" and rise["dev_max_inputs"] is None
    assert rise["postprocess"]["validation_fraction"] == 0.0 and dino["postprocess"]["validation_fraction"] == 0.1
    # GenSE: T5-base first decoder state, inputs cut at 64, best checkpoint by STSb dev every 250 steps
    t = gense["trainer"]
    assert t["encoder"] == "t5:google-t5/t5-base" and t["max_seq_length"] == 64
    assert t["selection_data"] == "stsb-dev" and t["evaluation_steps"] == 250 and t["batch_size"] == 1024
    assert dino["generation"]["generator"] == "openai-community/gpt2-xl" and dino["generation"]["dtype"] == "float32"
    assert rise["reweighter"]["encoder"] == "google-bert/bert-base-uncased"


def _stsb_sentences(data_dir, n=300):
    from dsgen.data.sts import stsb_train_sentences

    return stsb_train_sentences(data_dir)[:n]


def _tiny_models(root, data_dir):
    """Local folders of tiny random GPT-2, RoBERTa, BERT-uncased and T5 with tokenizers of their families."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import (BertConfig, BertModel, BertTokenizerFast, GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast,
                              RobertaConfig, RobertaModel, RobertaTokenizerFast)

    from tests.training.test_t5_encoder import build_tiny_t5

    texts = _stsb_sentences(data_dir) + ['Sentence 1: "', 'Sentence 2: "', "Task: Write two sentences that mean the same."]
    torch.manual_seed(0)
    # GPT-2: byte-level BPE, no pad token, absolute positions
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    gpt2_tok = GPT2TokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                 unk_token="<|endoftext|>")
    assert gpt2_tok.pad_token is None
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(gpt2_tok), n_positions=256, n_embd=32, n_layer=2, n_head=4,
                                      bos_token_id=gpt2_tok.eos_token_id, eos_token_id=gpt2_tok.eos_token_id))
    gpt2.save_pretrained(root / "gpt2")
    gpt2_tok.save_pretrained(root / "gpt2")
    # RoBERTa: byte-level BPE with <s> </s>, positions offset by the pad id + 1
    rob = Tokenizer(models.BPE())
    rob.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rob.decoder = decoders.ByteLevel()
    rob.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    rob.post_processor = processors.RobertaProcessing(("</s>", rob.token_to_id("</s>")), ("<s>", rob.token_to_id("<s>")))
    rob_tok = RobertaTokenizerFast(tokenizer_object=rob, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
                                   model_max_length=128)  # as roberta-base's 512 for its 514 positions
    RobertaModel(RobertaConfig(vocab_size=len(rob_tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=130, pad_token_id=rob_tok.pad_token_id),
                 add_pooling_layer=False).save_pretrained(root / "roberta")
    rob_tok.save_pretrained(root / "roberta")
    # BERT uncased: WordPiece, lower-casing normaliser
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]",
                                                                                             "[SEP]", "[MASK]"]))
    wp.post_processor = processors.BertProcessing(("[SEP]", wp.token_to_id("[SEP]")), ("[CLS]", wp.token_to_id("[CLS]")))
    wp.decoder = decoders.WordPiece()
    bert_tok = BertTokenizerFast(tokenizer_object=wp, do_lower_case=True, model_max_length=256)
    BertModel(BertConfig(vocab_size=len(bert_tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=256)).save_pretrained(root / "bert")
    bert_tok.save_pretrained(root / "bert")
    build_tiny_t5(root / "t5", texts + ["Question: what can we draw from the above sentence?"])
    return {name: root / name for name in ("gpt2", "roberta", "bert", "t5")}


OVERRIDDEN = {"encoder", "generation.generator", "generation.device", "trainer.encoder", "trainer.device", "reweighter.encoder",
              "reweighter.device", "max_inputs", "dev_max_inputs", "preset", "trainer.batch_size", "trainer.mini_batch_size",
              "trainer.min_trained_steps", "trainer.epochs"}


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k not in ("method",):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@pytest.mark.slow
def test_the_paper_path_runs_end_to_end_on_the_papers_architectures(tmp_path, sts_data_dir):
    from tests.test_cli import dsgen

    paths = _tiny_models(tmp_path, sts_data_dir)
    text = (load_preset.__globals__["resources"].files("dsgen.benchmarks.presets") / "paper.toml").read_text()
    # 40 inputs: a random tiny GPT-2 closes an output with a quote in about 1 of 10 tries, and GenSE needs an
    # entailment and a contradiction of the same input for a triplet
    text = (text.replace('"openai-community/gpt2-xl"', f'"{paths["gpt2"]}"')
                .replace('"FacebookAI/roberta-base"', f'"{paths["roberta"]}"')
                .replace('"google-bert/bert-base-uncased"', f'"{paths["bert"]}"')
                .replace('"t5:google-t5/t5-base"', f'"t5:{paths["t5"]}"')
                .replace('device = "auto"', 'device = "cpu"')
                .replace("seeds = [1, 2, 3]", "seeds = [1]\nmax_inputs = 40\ndev_max_inputs = 6")
                # a few dozen pairs in the papers' batches (32, GenSE's 1024) make one step, all warm-up: batches
                # small enough for several steps (GenSE's few triplets over 4 epochs), held to a floor of 2 steps at
                # a non-zero learning rate
                .replace("[training]\n", "[training]\nbatch_size = 4\nmin_trained_steps = 2\n")
                .replace("batch_size = 1024\nmini_batch_size = 64", "batch_size = 2\nmini_batch_size = 2\nepochs = 4"))
    assert "batch_size = 4" in text and "batch_size = 2\n" in text
    preset = tmp_path / "paper.toml"  # the paper preset, but for the model paths, the input counts and the batches
    preset.write_text(text)
    env = {"DSGEN_DATA_DIR": str(sts_data_dir), "HF_HUB_OFFLINE": "1"}
    out = dsgen("compare", "dino", "rise", "gense", "gense-no-filter", "--preset", str(preset), "--out",
                str(tmp_path / "runs"), "--quiet", env=env, timeout=1800)
    assert out.returncode == 0, out.stderr + out.stdout
    results = {json.loads(p.read_text())["method"]: json.loads(p.read_text())
               for p in (tmp_path / "runs" / "results").rglob("data-*-seed-*.json") if not p.name.endswith(".failed.json")}
    assert {"dino", "rise", "gense-no-filter", "base"} <= set(results)
    if "gense" not in results:  # a random tiny GPT-2 as GenSE's zero-shot judge rarely reaches alpha 0.9: the whole
        # path ran up to the filter, which said so (a failure is recorded, never a result)
        (failed,) = (tmp_path / "runs" / "results").rglob("gense/*/data-*-seed-1.failed.json")
        assert "keeps" in json.loads(failed.read_text())["reason"] or "triplet" in json.loads(failed.read_text())["reason"]
    for method, result in results.items():
        ran = _flat(result["extra"]["plan"])
        paper = _flat(plan_run(method, load_preset("paper"), 1).to_dict())
        differ = {k for k in set(ran) | set(paper) if ran.get(k) != paper.get(k)}
        assert differ <= OVERRIDDEN, (method, {k: (ran.get(k), paper.get(k)) for k in differ - OVERRIDDEN})
    assert results["rise"]["extra"]["dev_inputs"] == 6 and results["rise"]["extra"]["reweighting"]["kept"] > 0
    training = results["gense-no-filter"]["extra"]["training"]
    # selection on STSb dev every 250 steps only (GenSE's evaluation_strategy steps): this run is shorter
    assert training["evaluation_interval"] == 250 and (training["validation_history"] or training["steps"] < 250)
    for method, result in results.items():  # every trained row trained: steps at a non-zero rate, weights moved
        training = result["extra"].get("training")
        if method == "base":
            assert training is None
            continue
        assert training["nonzero_lr_steps"] >= training["min_trained_steps"] == 2, (method, training)
        assert training["optimizer_steps"] > training["nonzero_lr_steps"]  # the first step is warm-up, at rate 0
        assert training["weight_update"] > 1e-6, (method, training)
