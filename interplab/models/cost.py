"""What a forward pass costs, in floating-point operations, for sizing work before it runs (issue 48).

The usual transformer count: 2 FLOPs per parameter per token through the body (embedding lookups are free), plus
2 · d_model · d_vocab per token that is unembedded (a patching sweep unembeds only the last position), plus the
attention scores (2 · 2 · n_layers · d_model · positions per token). A backward pass costs about twice its forward.
These are estimates for a progress bar's ETA, not benchmarks."""
from __future__ import annotations

__all__ = ["parameter_count", "forward_flops"]


def parameter_count(model) -> int:
    """Parameters of a LabModel's transformers module (tied embeddings counted once)."""
    hf = getattr(model, "hf_model", model)
    return int(sum(p.numel() for p in hf.parameters()))


def forward_flops(model, tokens: int, *, rows: int = 1, unembedded: int | None = None) -> float:
    """FLOPs of `rows` forwards of `tokens` tokens each; `unembedded` tokens per row go through the unembedding
    (default all of them)."""
    d, vocab, layers = int(model.d_model), int(model.d_vocab), int(model.n_layers)
    body = max(0, parameter_count(model) - _embedding_params(model))   # lookups on the way in, unembedding below
    unemb = tokens if unembedded is None else unembedded
    attn = 4 * layers * d * tokens                               # scores and weighted values, per token
    return float(rows) * (2.0 * body * tokens + 2.0 * d * vocab * unemb + attn * tokens)


def _embedding_params(model) -> int:
    hf = getattr(model, "hf_model", model)
    try:
        w_in = hf.get_input_embeddings().weight
        out = hf.get_output_embeddings()
        w_out = None if out is None else out.weight
    except (AttributeError, NotImplementedError):
        return int(model.d_model) * int(model.d_vocab)
    tied = w_out is None or w_out.data_ptr() == w_in.data_ptr()
    return int(w_in.numel()) + (0 if tied else int(w_out.numel()))
