"""GenSE's sentence encoder: a T5 encoder-decoder whose first decoder state is the embedding."""

import torch


def build_tiny_t5(path, texts=None):
    """A tiny random T5 with a real T5-family tokenizer (SentencePiece-style Unigram, trained here on
    ``texts``: STS benchmark sentences in the paper-path test)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import T5Config, T5Model, T5TokenizerFast

    texts = texts or ["A man is playing a guitar.", "Two dogs run in a field.", "A woman slices an onion.",
                      "The cat sleeps on the sofa.", "Children play football in the park."] * 20
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=120 if len(set(texts)) < 50 else 400, special_tokens=["<pad>", "</s>", "<unk>"],
                                                           unk_token="<unk>"))
    fast = T5TokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", extra_ids=0)
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(fast), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    T5Model(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def test_the_embedding_is_the_first_decoder_state_and_survives_save_and_load(tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import T5Model, T5TokenizerFast

    from dsgen.encoders import load_encoder

    path = build_tiny_t5(tmp_path / "t5")
    model = load_encoder(f"t5:{path}", "cpu")
    assert model.max_seq_length == 64
    texts = ["A man is playing a guitar.", "The cat sleeps."]
    ours = model.encode(texts, convert_to_tensor=True)
    t5, tok = T5Model.from_pretrained(path).eval(), T5TokenizerFast.from_pretrained(path)
    with torch.no_grad():
        for i, text in enumerate(texts):  # by hand: encoder over the sentence, decoder fed the start token alone
            ids = tok(text, return_tensors="pt")
            state = t5(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"],
                       decoder_input_ids=torch.tensor([[0]])).last_hidden_state[0, 0]
            assert torch.allclose(ours[i], state, atol=1e-5)
    model.save(str(tmp_path / "saved"))
    again = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    assert torch.allclose(again.encode(texts, convert_to_tensor=True), ours, atol=1e-6)
    assert again.max_seq_length == 64
