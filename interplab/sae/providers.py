"""Activation providers for SAE training: FAST (one complete chat-templated dialogue per sequence) and block
training (SAELens packing: concatenate, insert BOS/separators, chop into context_size blocks).

Both are iterables of float activation chunks [n_tokens, d_model] (one chunk per model forward), which is what
SAELens's `mixing_buffer` consumes (`train_sae` does that, with mix fraction 0.5). `iter_chunks()` gives the same
chunks with provenance (token id, sample index, position in the sample, position in the forward sequence) for
evaluation, feature statistics and the packing-leakage tests.

FAST forwards are right-sized micro-batches: `LabModel.run` left-pads with an attention mask and per-row position
ids, and padding rows are dropped, so the activations equal one-dialogue-per-forward (paper procedure; tested to
1e-4). `micro_batch=1` is exactly the paper's batch-1 procedure."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from interplab.core.errors import ConfigError, DataError, InputError
from interplab.interventions.block_diagonal import BlockDiagonalAttention  # noqa: F401 - re-exported
from interplab.sae.chat import chat_ids, is_dialogue, text_ids


@dataclass
class Chunk:
    """Activations of one forward (padding removed) with per-row provenance.

    acts [n, d]; token_ids [n]; sample [n] (index into the provider's samples; -1 for tokens block packing
    inserted: BOS / separators); position [n] (position inside its sample; -1 for inserted tokens);
    seq_position [n] (position inside the forwarded sequence: equals `position` for FAST); seq [n] (index of the
    forwarded sequence: a sample for FAST, a block for block training)."""

    acts: torch.Tensor
    token_ids: torch.Tensor
    sample: torch.Tensor
    position: torch.Tensor
    seq_position: torch.Tensor
    seq: torch.Tensor


def _tokenize_samples(model: Any, data: Sequence[Any], truncate: int | None) -> tuple[list[list[int]], str]:
    if data is None or len(data) == 0:
        raise InputError("no samples given: pass a non-empty list of dialogues, texts or token-id lists")
    tok = model.tokenizer
    first = data[0]
    if is_dialogue(first):
        kind = "dialogues"
        ids = [chat_ids(tok, d) for d in data]
    elif isinstance(first, str):
        kind = "texts"
        ids = [text_ids(tok, t) for t in data]
    elif isinstance(first, (list, tuple)) and first and all(isinstance(t, int) for t in first):
        kind = "token_ids"
        ids = [list(map(int, t)) for t in data]
    else:
        raise InputError("samples must be dialogues (lists of {'role','content'} dicts), strings or token-id lists; "
                         f"got {type(first).__name__}")
    if truncate is not None:
        if truncate <= 0:
            raise ConfigError(f"truncate must be positive, got {truncate}")
        ids = [x[:truncate] for x in ids]
    empty = [i for i, x in enumerate(ids) if len(x) == 0]
    if empty:
        raise DataError(f"samples {empty[:5]} tokenised to zero tokens")
    n_ctx = getattr(model, "n_ctx", None)
    if n_ctx:
        too_long = [i for i, x in enumerate(ids) if len(x) > n_ctx]
        if too_long:
            raise InputError(f"samples {too_long[:5]} are longer than the model context ({n_ctx}); set truncate<={n_ctx}")
    return ids, kind


def _harvest(model: Any, seqs: list[list[int]], site: str) -> list[torch.Tensor]:
    """Run one padded micro-batch and return the real-token activations of each sequence ([L_i, d] each)."""
    out = model.run(seqs, capture=[site], logits=False)
    acts = out.cache[site]
    mask = out.batch.attention_mask.bool()
    res = []
    for i, s in enumerate(seqs):
        a = acts[i][mask[i].to(acts.device)]
        if a.shape[0] != len(s):
            raise DataError(f"harvest returned {a.shape[0]} rows for a {len(s)}-token sequence (padding mismatch)")
        res.append(a)
    return res


class ActivationProvider:
    """Base class: an iterable of activation chunks [n, d] for SAELens `mixing_buffer`.

    Iterating yields float32 CPU tensors; with `repeat=True` it cycles through the data forever, reshuffling
    samples every epoch with seed + epoch."""

    mode = "base"

    def __init__(self, model: Any, site: str, *, micro_batch: int, shuffle: bool, seed: int, repeat: bool,
                 exclude_token_ids: Sequence[int] = (), exclude_massive: float = 0.0):
        from interplab.core.sites import parse_site

        parse_site(site, model.n_layers)  # raises SiteError listing valid sites
        if micro_batch <= 0:
            raise ConfigError(f"micro_batch must be positive, got {micro_batch}")
        self.model, self.site = model, site
        self.micro_batch, self.shuffle, self.seed, self.repeat = int(micro_batch), bool(shuffle), int(seed), bool(repeat)
        self.exclude_token_ids = tuple(int(i) for i in exclude_token_ids)
        if exclude_massive and not float(exclude_massive) > 1:
            raise ConfigError(f"exclude_massive must be 0 (keep every position) or a factor > 1 of the median norm; "
                              f"got {exclude_massive}")
        self.exclude_massive = float(exclude_massive or 0.0)
        self.tokens_harvested = 0
        self.forwards = 0

    # subclasses implement _epoch_chunks(epoch)
    def _epoch_chunks(self, epoch: int) -> Iterator[Chunk]:  # pragma: no cover - abstract
        raise NotImplementedError

    def iter_chunks(self, epochs: int | None = 1) -> Iterator[Chunk]:
        """Chunks with provenance; `epochs=None` cycles forever."""
        e = 0
        while epochs is None or e < epochs:
            n = 0
            for ch in self._epoch_chunks(e):
                if self.exclude_token_ids:
                    keep = ~torch.isin(ch.token_ids, torch.tensor(self.exclude_token_ids))
                    ch = Chunk(*(getattr(ch, f)[keep] for f in ("acts", "token_ids", "sample", "position",
                                                                 "seq_position", "seq")))
                if self.exclude_massive and ch.acts.shape[0]:
                    from interplab.core.scale import massive_mask

                    keep = ~massive_mask(ch.acts, self.exclude_massive)
                    ch = Chunk(*(getattr(ch, f)[keep] for f in ("acts", "token_ids", "sample", "position",
                                                                 "seq_position", "seq")))
                if ch.acts.shape[0] == 0:
                    continue
                n += ch.acts.shape[0]
                self.tokens_harvested += ch.acts.shape[0]
                yield ch
            if n == 0:
                raise DataError("the provider produced no activations (all tokens excluded or no full block)")
            e += 1

    def __iter__(self) -> Iterator[torch.Tensor]:
        for ch in self.iter_chunks(None if self.repeat else 1):
            yield ch.acts

    def _order(self, n: int, epoch: int) -> list[int]:
        idx = list(range(n))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(idx)
        return idx

    def describe(self) -> dict:
        return {"mode": self.mode, "site": self.site, "micro_batch": self.micro_batch, "shuffle": self.shuffle,
                "seed": self.seed, "exclude_token_ids": list(self.exclude_token_ids),
                "exclude_massive": self.exclude_massive}


class FastProvider(ActivationProvider):
    """FAST: one complete chat-templated sample per sequence (no packing), every position kept (minus
    `exclude_token_ids`), forwarded in padded micro-batches whose padding rows are dropped."""

    mode = "fast"

    def __init__(self, model: Any, data: Sequence[Any], *, site: str, truncate: int | None = 8192,
                 micro_batch: int = 16, exclude_token_ids: Sequence[int] = (), shuffle: bool = True, seed: int = 42,
                 repeat: bool = False, bucket: bool = True, store=None, exclude_massive: float = 0.0):
        super().__init__(model, site, micro_batch=micro_batch, shuffle=shuffle, seed=seed, repeat=repeat,
                         exclude_token_ids=exclude_token_ids, exclude_massive=exclude_massive)
        self.truncate = truncate
        self.samples, self.data_kind = _tokenize_samples(model, data, truncate)
        self.bucket = bool(bucket)
        self.store_dir = store
        self._store = None        # (ActivationStore/InMemoryStore, first row of each sample)

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.samples)

    def _batches(self, epoch: int) -> list[list[int]]:
        order = self._order(len(self.samples), epoch)
        mb = self.micro_batch
        if self.bucket and mb > 1:
            # sort by length inside windows of 8 micro-batches: less padding, order still shuffled at large scale
            w = 8 * mb
            order = [i for k in range(0, len(order), w)
                     for i in sorted(order[k:k + w], key=lambda j: len(self.samples[j]))]
        return [order[k:k + mb] for k in range(0, len(order), mb)]

    def _harvested(self):
        """Harvest every sample once, in epoch 0's micro-batches (so epoch 0 is bit-identical to the streaming path),
        into the store; later epochs read their samples back instead of re-running the model."""
        if self._store is None:
            from interplab.models.harvest import harvest

            order = [i for idx in self._batches(0) for i in idx]
            st = harvest(self.model, [self.samples[i] for i in order], [self.site],
                         None if self.store_dir == "memory" else self.store_dir, batch_size=self.micro_batch,
                         positions="all")
            self.forwards += st.n_shards
            starts = torch.zeros(len(self.samples), dtype=torch.long)
            lengths = torch.tensor([len(self.samples[i]) for i in order])
            starts[torch.tensor(order)] = torch.cumsum(lengths, 0) - lengths
            self._store = (st, starts)
        return self._store

    def _batch_acts(self, idx: list[int]) -> list[torch.Tensor]:
        if self.store_dir is None:
            seqs = [self.samples[i] for i in idx]
            with torch.no_grad():
                acts = _harvest(self.model, seqs, self.site)
            self.forwards += 1
            return acts
        st, starts = self._harvested()
        rows = torch.cat([torch.arange(int(starts[i]), int(starts[i]) + len(self.samples[i])) for i in idx])
        flat = st.read(self.site, rows)
        return list(flat.split([len(self.samples[i]) for i in idx]))

    def _epoch_chunks(self, epoch: int) -> Iterator[Chunk]:
        for idx in self._batches(epoch):
            acts = self._batch_acts(idx)
            for i, a in zip(idx, acts):
                L = a.shape[0]
                pos = torch.arange(L)
                yield Chunk(acts=a.detach().float().cpu(), token_ids=torch.tensor(self.samples[i]),
                            sample=torch.full((L,), i), position=pos, seq_position=pos, seq=torch.full((L,), i))

    def describe(self) -> dict:
        return {**super().describe(), "truncate": self.truncate, "data_kind": self.data_kind,
                "n_samples": len(self.samples), "n_tokens": self.n_tokens,
                "store": None if self.store_dir is None else str(self.store_dir)}


def pack_blocks(samples: Sequence[Sequence[int]], context_size: int, bos_id: int | None,
                separator: str = "bos", prepend_bos: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SAELens block packing (`concat_and_batch_sequences`, prepend BOS to every block, BOS separator between
    samples or none) plus provenance.

    Returns blocks [n_blocks, context_size] and, per block position, the sample index and the position inside
    that sample (-1 for BOS / separators SAELens inserted). Provenance is recovered by aligning SAELens's output
    with the input stream: an inserted token always differs from the next real token (SAELens inserts only if it
    does), so a greedy alignment is unambiguous; anything else raises DataError."""
    from sae_lens.tokenization_and_batching import concat_and_batch_sequences

    if context_size <= 1:
        raise ConfigError(f"context_size must be > 1, got {context_size}")
    if separator not in ("bos", "none"):
        raise ConfigError(f"separator must be 'bos' or 'none', got {separator!r}")
    sep = bos_id if separator == "bos" else None
    blocks = list(concat_and_batch_sequences(
        (torch.tensor(list(s), dtype=torch.long) for s in samples), context_size=context_size,
        begin_batch_token_id=bos_id if prepend_bos else None, sequence_separator_token_id=sep))
    if not blocks:
        raise DataError(f"not enough tokens ({sum(len(s) for s in samples)}) for one block of {context_size}")
    B = torch.stack(blocks)
    flat = B.reshape(-1).tolist()
    inserted_ok = {t for t in (bos_id if prepend_bos else None, sep) if t is not None}
    src_sample = torch.full((len(flat),), -1, dtype=torch.long)
    src_pos = torch.full((len(flat),), -1, dtype=torch.long)
    si, pi = 0, 0
    for k, t in enumerate(flat):
        while si < len(samples) and pi >= len(samples[si]):
            si, pi = si + 1, 0
        if si < len(samples) and t == samples[si][pi]:
            src_sample[k], src_pos[k] = si, pi
            pi += 1
        elif t in inserted_ok:
            continue
        else:
            raise DataError(f"block packing dropped or reordered tokens at stream position {k}; cannot align")
    return B, src_sample.view_as(B), src_pos.view_as(B)


class BlockProvider(ActivationProvider):
    """Block training baseline: samples (dialogues -> BT(F), texts -> BT(P)) are concatenated with SAELens's
    `concat_and_batch_sequences` into context_size blocks with BOS at position 0 of every block and a BOS separator
    between samples (separator="bos") or none; the trailing partial block is dropped. Every position is harvested."""

    mode = "block"

    def __init__(self, model: Any, data: Sequence[Any], *, site: str, context_size: int = 128,
                 separator: str = "bos", micro_batch: int = 8, shuffle: bool = True, seed: int = 42,
                 repeat: bool = False, truncate: int | None = 8192, exclude_token_ids: Sequence[int] = (),
                 bos_id: int | None = None, prepend_bos: bool = True, exclude_massive: float = 0.0):
        super().__init__(model, site, micro_batch=micro_batch, shuffle=shuffle, seed=seed, repeat=repeat,
                         exclude_token_ids=exclude_token_ids, exclude_massive=exclude_massive)
        n_ctx = getattr(model, "n_ctx", None)
        if n_ctx and context_size > n_ctx:
            raise ConfigError(f"context_size {context_size} exceeds the model context {n_ctx}")
        self.context_size, self.separator = int(context_size), separator
        self.samples, self.data_kind = _tokenize_samples(model, data, truncate)
        tok = model.tokenizer
        if bos_id is None:
            bos_id = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id  # TL convention
        self.bos_id = bos_id
        self.prepend_bos = bool(prepend_bos)
        self._packed: dict[int, tuple] = {}

    def packed(self, epoch: int = 0):
        """(blocks, sample, position) for an epoch (samples shuffled with seed + epoch before packing); the sample
        indices refer to `self.samples`."""
        if epoch not in self._packed:
            order = self._order(len(self.samples), epoch)
            B, s, p = pack_blocks([self.samples[i] for i in order], self.context_size, self.bos_id, self.separator,
                                  self.prepend_bos)
            omap = torch.tensor(order + [-1])  # -1 maps to -1
            s = omap[s]
            self._packed = {epoch: (B, s, p)}
        return self._packed[epoch]

    def _epoch_chunks(self, epoch: int) -> Iterator[Chunk]:
        B, S, P = self.packed(epoch)
        C = self.context_size
        for k in range(0, B.shape[0], self.micro_batch):
            seqs = B[k:k + self.micro_batch].tolist()
            with torch.no_grad():
                acts = _harvest(self.model, seqs, self.site)
            self.forwards += 1
            for j, a in enumerate(acts):
                b = k + j
                yield Chunk(acts=a.detach().float().cpu(), token_ids=B[b].clone(), sample=S[b].clone(),
                            position=P[b].clone(), seq_position=torch.arange(C), seq=torch.full((C,), b))

    def describe(self) -> dict:
        return {**super().describe(), "context_size": self.context_size, "separator": self.separator,
                "data_kind": self.data_kind, "bos_id": self.bos_id, "prepend_bos": self.prepend_bos, "n_samples": len(self.samples)}


class CachedProvider(ActivationProvider):
    """Another provider's first epoch, harvested once into memory and served for every epoch, in a chunk order
    reshuffled with seed + epoch (block providers: the same packing every epoch). `reseeded(seed)` gives a provider
    that shares the harvest, so a sweep of SAEs over one distribution runs the model once per distribution instead of
    once per SAE and epoch. Filters (`exclude_token_ids`, `exclude_massive`) are the wrapped provider's and apply
    when serving; `mode`, `samples` and `describe()` are the wrapped provider's (plus cached=True)."""

    def __init__(self, inner: ActivationProvider, *, seed: int | None = None, repeat: bool = True, _cache=None):
        if not isinstance(inner, ActivationProvider) or isinstance(inner, CachedProvider):
            raise InputError("CachedProvider wraps a fast_provider / block_provider")
        super().__init__(inner.model, inner.site, micro_batch=inner.micro_batch, shuffle=True,
                         seed=inner.seed if seed is None else int(seed), repeat=repeat,
                         exclude_token_ids=inner.exclude_token_ids, exclude_massive=inner.exclude_massive)
        self.inner = inner
        self.mode = inner.mode
        self._cache = _cache if _cache is not None else []   # one list shared by every reseeded copy

    def __getattr__(self, name):  # samples, data_kind, context_size, ... of the wrapped provider
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def harvest(self) -> "CachedProvider":
        """Run the model over the wrapped provider's epoch 0 now (otherwise on first use); returns self."""
        if not self._cache:
            self._cache.extend(self.inner._epoch_chunks(0))
            self.forwards = self.inner.forwards
        return self

    def reseeded(self, seed: int) -> "CachedProvider":
        return CachedProvider(self.inner, seed=seed, repeat=self.repeat, _cache=self._cache)

    def _epoch_chunks(self, epoch: int) -> Iterator[Chunk]:
        self.harvest()
        for i in self._order(len(self._cache), epoch):
            yield self._cache[i]

    def describe(self) -> dict:
        return {**self.inner.describe(), "seed": self.seed, "cached": True}


def fast_provider(model: Any, dialogues: Sequence[Any], *, site: str, truncate: int | None = 8192,
                  micro_batch: int = 16, exclude_token_ids: Sequence[int] = (), shuffle: bool = True,
                  seed: int = 42, repeat: bool = False, bucket: bool = True, store=None,
                  exclude_massive: float = 0.0) -> FastProvider:
    """FAST activation provider: each dialogue rendered with the model's chat template (no generation prompt),
    truncated to `truncate` tokens, forwarded on its own (padded micro-batches of `micro_batch` samples with masks
    and per-sample positions; equal to batch 1), all positions harvested except `exclude_token_ids` and, with
    `exclude_massive` > 0, a sample's massive positions (norm above that factor x the sample's median norm,
    `interplab.core.scale.massive_mask`: SmolLM2's first-token attention sink, ~2.5e4 against ~2e2).

    Samples are shuffled at sample level (seed) and, with `bucket`, length-sorted inside windows of 8 micro-batches
    to reduce padding. Iterate it for [n, d] chunks (feed to SAELens `mixing_buffer`) or call `iter_chunks()`.

    store: None (default) re-runs the model every epoch, streaming; a folder harvests every sample once to a resumable
    disk store (`interplab.harvest`, positions="all") and later epochs read it back; "memory" does the same in RAM."""
    return FastProvider(model, dialogues, site=site, truncate=truncate, micro_batch=micro_batch,
                        exclude_token_ids=exclude_token_ids, shuffle=shuffle, seed=seed, repeat=repeat, bucket=bucket,
                        store=store, exclude_massive=exclude_massive)


def block_provider(model: Any, data: Sequence[Any], *, site: str, context_size: int = 128, separator: str = "bos",
                   micro_batch: int = 8, shuffle: bool = True, seed: int = 42, repeat: bool = False,
                   truncate: int | None = 8192, exclude_token_ids: Sequence[int] = (),
                   prepend_bos: bool = True, exclude_massive: float = 0.0) -> BlockProvider:
    """Block-training provider (SAELens semantics): dialogues (BT(F), chat-templated) or plain texts (BT(P))
    concatenated and chopped into `context_size` blocks, BOS at each block start, separator "bos" | "none" between
    samples, trailing partial block dropped, every position harvested (but `exclude_token_ids` and, with
    `exclude_massive`, a block's massive positions, as in `fast_provider`)."""
    return BlockProvider(model, data, site=site, context_size=context_size, separator=separator,
                         micro_batch=micro_batch, shuffle=shuffle, seed=seed, repeat=repeat, truncate=truncate,
                         exclude_token_ids=exclude_token_ids, prepend_bos=prepend_bos,
                         exclude_massive=exclude_massive)


def segment_ids(sample: torch.Tensor) -> torch.Tensor:
    """Segment index per block position from `sample` provenance ([..., C]): consecutive positions of the same
    sample share a segment; every inserted token (BOS / separator, sample -1) is a segment of its own."""
    s = sample
    new = torch.ones_like(s, dtype=torch.bool)
    new[..., 1:] = (s[..., 1:] != s[..., :-1]) | (s[..., 1:] < 0)
    return new.long().cumsum(-1) - 1


def mixed_batches(provider: Any, *, batch_tokens: int, buffer_tokens: int | None = None, mix_fraction: float = 0.5,
                  seed: int = 42) -> Iterator[torch.Tensor]:
    """SAELens `mixing_buffer` over a provider (fill -> shuffle -> serve half -> refill), seeded. Close the
    returned generator when done (offline pitfall 8)."""
    from sae_lens.training.mixing_buffer import mixing_buffer

    torch.manual_seed(seed)
    return mixing_buffer(buffer_tokens or 16 * batch_tokens, batch_tokens, iter(provider), mix_fraction=mix_fraction)
