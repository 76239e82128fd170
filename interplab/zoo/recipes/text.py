"""text-base: a small Llama-style LM with a locally trained byte-level BPE (2,048 entries), pretrained on the offline
English text (`interplab.data.corpus`, Python's pydoc topics). Greedy decoding from it must still repeat (TTR < 0.5),
which the hyperfitting capability needs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from interplab.train.arch import ArchConfig
from interplab.train.config import TrainConfig
from interplab.zoo.registry import BuildContext, Recipe, register

TEXT_ARCH = ArchConfig(family="llama", n_layers=4, d_model=128, d_mlp=384, n_heads=4, n_kv_heads=2, d_head=32,
                       n_ctx=256)
TEXT_DATA = {"sources": ["pydoc"], "heldout_frac": 0.1, "corpus_seed": 0, "bpe_vocab": 2048, "seq_len": 128,
             "batch_size": 16}


class TextStream:
    """Seeded step -> batch source over one token stream: each row is <bos> + (seq_len - 1) consecutive tokens
    starting at a random offset (loss on every token)."""

    def __init__(self, stream: np.ndarray, seq_len: int, batch_size: int, bos_id: int, seed: int = 0):
        from interplab.core.errors import DataError

        if len(stream) <= seq_len:
            raise DataError(f"token stream of {len(stream)} tokens is shorter than seq_len {seq_len}")
        self.stream, self.seq_len, self.batch_size, self.bos_id, self.seed = stream, seq_len, batch_size, bos_id, seed

    def __call__(self, step: int) -> dict:
        import torch

        rng = np.random.default_rng([self.seed, int(step)])
        L = self.seq_len - 1
        starts = rng.integers(0, len(self.stream) - L, size=self.batch_size)
        rows = np.stack([self.stream[s:s + L] for s in starts])
        ids = np.concatenate([np.full((self.batch_size, 1), self.bos_id), rows], axis=1)
        return {"input_ids": torch.from_numpy(ids.astype(np.int64))}


def encode_paragraphs(tok, paragraphs) -> np.ndarray:
    """One stream: each paragraph's ids followed by <eos>."""
    enc = tok(list(paragraphs), add_special_tokens=False)["input_ids"]
    out: list[int] = []
    for ids in enc:
        out.extend(ids)
        out.append(tok.eos_token_id)
    return np.asarray(out, dtype=np.int64)


def ttr(ids) -> float:
    ids = list(ids)
    return len(set(ids)) / max(1, len(ids))


def text_prompts(tok, paragraphs, n: int = 24, prompt_len: int = 32) -> list[list[int]]:
    """The first `prompt_len` tokens (after <bos>) of the first n held-out paragraphs that are long enough."""
    out = []
    for p in paragraphs:
        ids = tok(p).input_ids
        if len(ids) >= prompt_len + 1:
            out.append(ids[:prompt_len + 1])
        if len(out) == n:
            break
    return out


def text_evaluate(model, tokenizer, recipe: Recipe, n: int = 24, seed: int = 0, new_tokens: int = 96) -> dict:
    """Held-out loss/perplexity (windows of the held-out stream) and greedy TTR on n held-out prompts (32-token
    context, `new_tokens` greedy tokens, KV cache): {"heldout_loss", "heldout_ppl", "ttr_greedy"}."""
    import torch

    from interplab.data.corpus import load_corpus

    d = recipe.data
    corpus = load_corpus(tuple(d["sources"]), d["heldout_frac"], d["corpus_seed"])
    stream = encode_paragraphs(tokenizer, corpus.heldout)
    src = TextStream(stream, int(d["seq_len"]), 32, tokenizer.bos_token_id, seed=seed + 99)
    model.eval()
    with torch.no_grad():
        losses = []
        for s in range(2):
            b = src(s)["input_ids"]
            logits = model(input_ids=b).logits[:, :-1]
            losses.append(float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                  b[:, 1:].reshape(-1))))
        prompts = torch.tensor(text_prompts(tokenizer, corpus.heldout, n))
        out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        gen = out[:, prompts.shape[1]:]
    hl = float(np.mean(losses))
    return {"heldout_loss": hl, "heldout_ppl": float(np.exp(hl)),
            "ttr_greedy": float(np.mean([ttr(g.tolist()) for g in gen]))}


def build_text(recipe: Recipe, ctx: BuildContext) -> dict:
    import torch

    from interplab.data.bpe import train_bpe
    from interplab.data.corpus import load_corpus
    from interplab.train.arch import build_model, count_params
    from interplab.train.checkpoint import save_checkpoint
    from interplab.train.trainer import train, write_log

    if ctx.num_threads:
        torch.set_num_threads(ctx.num_threads)
    d = {**recipe.data, **ctx.overrides}
    corpus = load_corpus(tuple(d["sources"]), d["heldout_frac"], d["corpus_seed"])
    if d.get("max_paragraphs"):
        corpus = type(corpus)(corpus.train[:int(d["max_paragraphs"])], corpus.heldout, corpus.sources)
    tok = train_bpe(corpus.train, int(d["bpe_vocab"]))
    stream = encode_paragraphs(tok, corpus.train)
    src = TextStream(stream, int(d["seq_len"]), int(d["batch_size"]), tok.bos_token_id, seed=recipe.seed)
    model = build_model(recipe.arch, tok, seed=recipe.seed)
    cfg = replace(recipe.train, steps=ctx.steps, seed=recipe.seed, progress=ctx.progress,
                  num_threads=ctx.num_threads, time_budget_s=ctx.time_budget_s)
    res = train(model, src, cfg, out_dir=ctx.work_dir, resume=ctx.resume,
                log_fn=write_log(ctx.log_path) if ctx.log_path else None, desc=recipe.name)
    save_checkpoint(model, tok, ctx.out_dir, overwrite=True, train_info={
        "recipe": recipe.summary() | {"available": True, "path": None}, "train_config": cfg.to_dict(),
        "steps_done": res.steps_done, "corpus": {"train_paragraphs": len(corpus.train),
                                                 "heldout_paragraphs": len(corpus.heldout),
                                                 "train_tokens": int(len(stream))}})
    metrics = text_evaluate(model, tok, recipe, n=int(d.get("eval_n", 24)))
    return {"train": res.to_dict(), "metrics": metrics, "n_params": count_params(model),
            "train_tokens": int(len(stream))}


register(Recipe(
    name="text-base",
    description="Llama-style 4L GQA LM (~1.3M params, byte-level BPE 2k) pretrained on offline English (pydoc)",
    family="text", build=build_text, arch=TEXT_ARCH, data=TEXT_DATA, steps=1500, seed=0,
    train=TrainConfig(lr=2e-3, warmup_steps=50, min_lr_ratio=0.1, weight_decay=0.1, grad_clip=1.0, log_every=25,
                      checkpoint_every=250),
    evaluate=text_evaluate, ceilings={"ttr_greedy": 0.5}, tags=("text", "base"),
    notes="Greedy decoding repeats (TTR < 0.5), as the hyperfitting capability needs.",
))
