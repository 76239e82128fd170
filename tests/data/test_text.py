"""Offline English corpus and the locally trained byte-level BPE."""
from __future__ import annotations

from pathlib import Path

from interplab.data.bpe import train_bpe
from interplab.data.corpus import available_sources, load_corpus


def test_corpus_split_deterministic_disjoint():
    a = load_corpus(seed=0)
    b = load_corpus(seed=0)
    c = load_corpus(seed=1)
    assert a.train == b.train and a.heldout == b.heldout
    assert a.heldout != c.heldout
    assert not set(a.train) & set(a.heldout)
    assert 0.08 < len(a.heldout) / (len(a.train) + len(a.heldout)) < 0.12
    assert a.n_chars > 300_000 and "pydoc" in available_sources()


def test_no_third_party_text_committed():
    # the corpus is read at run time; nothing from it may live in the package
    root = Path(__file__).resolve().parents[2] / "interplab"
    big = [p for p in root.rglob("*") if p.is_file() and p.suffix in (".txt", ".cor", ".jsonl") and
           p.stat().st_size > 50_000]
    assert big == []


def test_bpe_small(tmp_path):
    corpus = load_corpus()
    tok = train_bpe(corpus.train[:150], vocab_size=400)
    assert 300 < len(tok) <= 400
    assert [tok.convert_ids_to_tokens(i) for i in range(6)] == ["<pad>", "<bos>", "<eos>", "<unk>",
                                                                 "<|im_start|>", "<|im_end|>"]
    text = "The for statement, with spaces  and\nnewlines: x = [1, 2]."
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text  # byte-level: lossless
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    re = AutoTokenizer.from_pretrained(tmp_path)
    assert re(text).input_ids == ids and re.chat_template == tok.chat_template
    again = train_bpe(corpus.train[:150], vocab_size=400)
    assert again.get_vocab() == tok.get_vocab()


def test_starts_with_answer_matches_whole_words_of_the_reply():
    from interplab.data.scoring import normalise_words, starts_with_answer

    assert normalise_words("  Paris.  It is") == "paris it is"
    assert starts_with_answer(" Paris.", "Paris") and starts_with_answer("Buenos Aires, of course", "buenos aires")
    assert starts_with_answer("v3", "v3") and not starts_with_answer("v31", "v3")
    assert not starts_with_answer("Parisian food", "Paris") and not starts_with_answer("The capital is Paris", "Paris")
    assert not starts_with_answer("anything", "") and not starts_with_answer("", "Paris")
