"""Small named grammars for tests, docs and the app's grammar picker."""
from __future__ import annotations

from interplab.grammar.pcfg import PCFG

HAND = """S -> Y Z [1]
Y -> Z Y [0.5]
Y -> 'a' [0.5]
Z -> 'a' [1]"""

TOY_ENGLISH = """S -> NP VP [1.0]
NP -> Det N [0.7]
NP -> NP PP [0.3]
VP -> V NP [0.6]
VP -> VP PP [0.4]
PP -> P NP [1.0]
Det -> 'the' [0.6]
Det -> 'a' [0.4]
N -> 'dog' [0.4]
N -> 'cat' [0.35]
N -> 'park' [0.25]
V -> 'saw' [0.6]
V -> 'chased' [0.4]
P -> 'in' [0.5]
P -> 'with' [0.5]"""


def hand_grammar() -> PCFG:
    """The spec's hand-checked grammar (rycolab/prefix-parsing tests): S→Y Z 1, Y→Z Y .5, Y→a .5, Z→a 1."""
    return PCFG.from_string(HAND, name="hand")


def _ub():
    from interplab.grammar.families import uniform_binary
    return uniform_binary(L=3, K=3, q=3, V=6, seed=0)


def _lay():
    from interplab.grammar.families import layered
    return layered(n_levels=2, q=2, V=3, seed=0)


def _rc():
    from interplab.grammar.families import random_cnf
    return random_cnf(N=4, V=4, p_bin=0.3, seed=0)


EXAMPLES = {
    "hand": hand_grammar,
    "toy-english": lambda: PCFG.from_string(TOY_ENGLISH, name="toy-english"),
    "uniform-binary-L3": _ub,
    "layered-2": _lay,
    "random-cnf-4": _rc,
}


def example(name: str) -> PCFG:
    """A named example grammar (keys of `EXAMPLES`)."""
    from interplab.core.errors import InputError

    if name not in EXAMPLES:
        raise InputError(f"unknown example grammar {name!r}; choose one of {sorted(EXAMPLES)}.")
    return EXAMPLES[name]()
