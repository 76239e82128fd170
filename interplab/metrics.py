"""Padding-aware metrics on logits (per-token loss, logit difference, answer probability and rank): the public
name of `interplab.models.metrics`, where they live so that every layer above the models can use them."""
from interplab.models.metrics import (  # noqa: F401
    answer_prob,
    answer_rank,
    logit_diff,
    position_logits,
    reply_loss,
    token_loss,
)

__all__ = ["token_loss", "logit_diff", "answer_prob", "answer_rank", "position_logits", "reply_loss"]
