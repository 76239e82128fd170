"""Probabilistic context-free grammars: dense CNF tensors, exact sampling, and batched log-space inside /
Viterbi / prefix (next-token) algorithms. Spec: docs/pcfg.md and ../shared/methods/pcfg_parse.md."""
from interplab.grammar.pcfg import PCFG, Tree, NonTightGrammarError, LongSampleWarning
from interplab.grammar.families import uniform_binary, layered, random_cnf, UniformBinary, Layered, RandomCNF
from interplab.grammar.siblings import dependent_siblings, DependentSiblings
from interplab.grammar.algorithms import (
    Chart, PrefixResult, ViterbiResult, inside, log_prob, viterbi, prefix, prefix_log_prob, next_token_logprobs,
    prefix_span_posteriors, span_marginals,
)
from interplab.grammar.dyadic import (DyadicInside, DyadicUndefinedError, dyadic_inside, dyadic_sizes,
                                      root_size, truncated_next_token_logprobs)
from interplab.grammar.examples import hand_grammar, EXAMPLES, example
from interplab.grammar.lm import grammar_vocab, ngram_baselines, sample_eval_set, to_model_ids
from interplab.grammar.oracle import GrammarOracleLM

__all__ = [
    "PCFG", "Tree", "NonTightGrammarError", "LongSampleWarning",
    "uniform_binary", "layered", "random_cnf", "UniformBinary", "Layered", "RandomCNF", "dependent_siblings",
    "DependentSiblings",
    "Chart", "PrefixResult", "ViterbiResult", "inside", "log_prob", "viterbi", "prefix", "prefix_log_prob",
    "next_token_logprobs", "prefix_span_posteriors", "span_marginals", "hand_grammar", "EXAMPLES", "example",
    "GrammarOracleLM", "DyadicInside", "DyadicUndefinedError", "dyadic_inside", "dyadic_sizes",
    "truncated_next_token_logprobs", "root_size", "grammar_vocab", "to_model_ids", "sample_eval_set", "ngram_baselines",
]
