"""Generation metrics on hand-made sequences (spec §8 test 7)."""
import math

import pytest

from interplab.probes.hyperfit.repetition import (
    distinct_n, diversity, generation_metrics, is_loop, loop_rate, metrics_table, rep_n, self_bleu, ttr, words,
)


def test_abab_values():
    s = "a b a b a b".split()
    assert ttr(s) == pytest.approx(2 / 6)
    assert distinct_n(s, 2) == pytest.approx(2 / 5)
    assert rep_n(s, 2) == pytest.approx(0.6)
    assert rep_n(s, 3) == pytest.approx(1 - 2 / 4)
    assert diversity(s) == pytest.approx((1 - 0.6) * (1 - 0.5) * (2 / 3))  # 4-grams: abab, baba, abab


def test_unique_sequence_and_window():
    s = list(range(200))
    assert ttr(s) == 1.0 and rep_n(s, 2) == 0.0 and diversity(s) == 1.0
    assert ttr([1] * 96 + list(range(100))) == pytest.approx(1 / 96)  # only the first 96 units count
    assert math.isnan(rep_n([1], 2))


def test_distinct_pooled():
    assert distinct_n([[1, 2, 3], [1, 2, 4]], 2) == pytest.approx(3 / 4)


def test_self_bleu():
    g = [[1, 2, 3, 4, 5, 6, 7, 8]] * 3
    assert self_bleu(g) == pytest.approx(1.0)
    h = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16], [17, 18, 19, 20, 21, 22, 23, 24]]
    assert self_bleu(h) < 0.05


def test_loops():
    assert is_loop([5, 6, 7] + [1, 2, 3] * 20)
    assert not is_loop(list(range(64)))
    assert not is_loop([1, 2] * 3)  # shorter than the window
    assert loop_rate([[1, 2] * 20, list(range(40))]) == 0.5


def test_generation_metrics_both_levels():
    toks = [[1, 2, 1, 2, 1, 2], [3, 4, 5, 6, 7, 8]]
    texts = ["a b a b a b", "c d e f g h"]
    m = generation_metrics(toks, texts)
    assert m["ttr"] == pytest.approx((2 / 6 + 1) / 2)
    assert m["word_ttr"] == pytest.approx((2 / 6 + 1) / 2)
    assert m["rep2"] == pytest.approx(0.3)
    assert m["distinct2"] == pytest.approx((2 + 5) / 10)
    assert m["n_generations"] == 2
    df = metrics_table({"x": (toks, texts), "y": toks})
    assert list(df["setting"]) == ["x", "y"] and "word_ttr" in df.columns
    assert words(" a  b\n c ") == ["a", "b", "c"]
