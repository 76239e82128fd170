import numpy as np
import pytest

from interplab.core.errors import InputError
from interplab.probes.crh import GibberishFilter, LLMJudge, TokenSetJudge, check_labels


def test_regex_modes_b4():
    fixed, faithful = GibberishFilter("fixed"), GibberishFilter("faithful")
    rep = "I think that that that that is the answer to your question today"
    assert fixed.is_gibberish(rep) and "repeated_word" in fixed.reasons(rep)
    assert not faithful.is_gibberish(rep)
    # whitespace counts as non-word only in the faithful 40% rule
    spaced = "a  b  c  d  e  f  g  h  i  j  k  l"          # 12 letters, 22 spaces
    assert "non_word_fraction" in faithful.reasons(spaced)
    assert "non_word_fraction" not in fixed.reasons(spaced)
    sym = "Sure!!!!!!!! here it is, the answer you wanted"
    assert fixed.is_gibberish(sym) and not faithful.is_gibberish(sym)
    normal = "The capital of France is Paris, a city on the Seine."
    assert not fixed.is_gibberish(normal) and not faithful.is_gibberish(normal)
    assert fixed.is_gibberish("   ") and faithful.is_gibberish("")
    # word boundary: 'the theory' is not a repetition
    assert "repeated_word" not in fixed.reasons("the the the theory of everything is here")
    # word-level organism tokens are distinct words in fixed mode
    assert not fixed.is_gibberish("w1 w2 w3 w4 w5 w6 w7")
    assert faithful.is_gibberish("w1 w2 w3 w4 w5 w6 w7")     # the shipped [A-Za-z]+ reads them all as 'w'


def test_token_set_judge():
    j = TokenSetJudge(["w7", "w9"])
    lab = j(["w1 w2 w3", "w1 w7 w3", "w9, done", "w3 w3 w3 w3 w3 w3", ""])
    np.testing.assert_array_equal(lab, [1, 2, 2, 3, 3])
    assert TokenSetJudge(["w7"], min_hits=2)(["w7 w1 w7"])[0] == 2
    with pytest.raises(InputError):
        j("w1 w2")


def test_llm_judge_invalid_counted():
    answers = iter(["2", "4", "garbage", "1"])
    j = LLMJudge(chat_fn=lambda prompt: next(answers), concept="cats")
    lab = j(["a cat sat", "b", "c", "d"])
    np.testing.assert_array_equal(lab, [2, 1, 1, 1])
    assert j.n_invalid == 2
    with pytest.raises(InputError):
        check_labels([1, 4], 2)
