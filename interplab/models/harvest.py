"""Harvesting activations at scale: `harvest(model, inputs, sites, out_dir)` streams captures to sharded safetensors
(one shard per batch, each written atomically) and returns an `ActivationStore` that reads rows lazily, so memory
stays flat in the number of prompts. Without `out_dir` it returns an `InMemoryStore` with the same interface.

Layout of a store folder:

    manifest.json           the harvest's arguments, a fingerprint of the inputs, per-site feature shapes and dtype,
                            per-shard row counts, and "complete": true -- rewritten (atomically) as the very last step
    shards/shard_000000.safetensors   one per batch: one tensor per site [rows, ...] plus "row" and "position" [rows]

Rows: positions="last" gives one row per prompt (its last real token); "all" gives one row per real token, flattened
in prompt order; a callable `positions(batch) -> bool [b, width]` (left-padded layout, like `Batch.attention_mask`) or
a list of per-prompt position lists (0 = a prompt's first real token) selects tokens explicitly. Every store carries
`row` (the prompt index) and `position` (the token's position inside its prompt) for every row.

Resuming: re-running with the same arguments skips the shards already on disk; different arguments raise
`HarvestMismatchError` rather than mixing two harvests. A crashed or interrupted harvest has no "complete" flag, and
`ActivationStore(dir)` refuses to open it unless asked (`allow_incomplete=True`)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from interplab.core import progress as progress_protocol
from interplab.core.errors import ConfigError, InputError, ResultsError, SiteError
from interplab.core.io import read_json, write_bytes, write_json
from interplab.core.sites import has_key_axis, parse_sites

FORMAT = "interplab-activation-store/1"
INDEX = ("row", "position")
POSITION_MODES = ("last", "all")

__all__ = ["harvest", "ActivationStore", "InMemoryStore", "HarvestMismatchError", "FORMAT"]


class HarvestMismatchError(ConfigError):
    """A store folder already holds a harvest made with different arguments (model, inputs, sites, positions, ...)."""


# ----------------------------------------------------------------------------------------------- reading stores
class _StoreBase:
    """What both stores share: sites, shapes, row reads by index and iteration by batches (shards)."""

    sites: list[str]
    shard_rows: list[int]

    @property
    def n_rows(self) -> int:
        return int(sum(self.shard_rows))

    @property
    def n_shards(self) -> int:
        return len(self.shard_rows)

    def __len__(self) -> int:
        return self.n_rows

    def shape(self, site: str) -> tuple[int, ...]:
        """(n_rows, *feature_shape) of `site` (or of "row"/"position": (n_rows,))."""
        return (self.n_rows, *self._feature_shape(site))

    def _feature_shape(self, site: str) -> tuple[int, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_site(self, site: str) -> None:
        if site not in self.sites and site not in INDEX:
            raise SiteError(f"site {site!r} is not in this store; stored sites: {self.sites} (and {list(INDEX)})")

    def _shard(self, i: int, names: Sequence[str]) -> dict[str, torch.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, site: str, rows=None) -> torch.Tensor:
        """Rows of `site` ([len(rows), ...]; all rows when rows is None). rows: an int, a slice, or an index array
        (any order, repeats allowed). Only the shards holding the requested rows are read."""
        self._check_site(site)
        n = self.n_rows
        if rows is None:
            idx = np.arange(n)
        elif isinstance(rows, slice):
            idx = np.arange(n)[rows]
        else:
            idx = np.atleast_1d(np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64))
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise InputError(f"row index out of range for a store of {n} rows")
        idx = np.where(idx < 0, idx + n, idx)
        bounds = np.cumsum([0, *self.shard_rows])
        shard_of = np.searchsorted(bounds, idx, side="right") - 1
        out = None
        for s in np.unique(shard_of):
            sel = shard_of == s
            part = self._shard(int(s), [site])[site][torch.as_tensor(idx[sel] - bounds[s])]
            if out is None:
                out = torch.empty((len(idx), *part.shape[1:]), dtype=part.dtype)
            out[torch.as_tensor(np.flatnonzero(sel))] = part
        if out is None:  # no rows asked for
            return torch.empty((0, *self._feature_shape(site)), dtype=self._dtype_of(site))
        return out

    def _dtype_of(self, site: str) -> torch.dtype:
        return torch.long if site in INDEX else self.dtype

    def iter_batches(self, sites: Sequence[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """One dict per shard (= per harvest batch): {site: [rows, ...], "row": [rows], "position": [rows]}."""
        names = list(self.sites if sites is None else sites)
        for s in names:
            self._check_site(s)
        names += [k for k in INDEX if k not in names]
        for i in range(self.n_shards):
            yield self._shard(i, names)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return self.iter_batches()

    def __repr__(self) -> str:
        shapes = ", ".join(f"{s}: {self.shape(s)}" for s in self.sites)
        return f"{type(self).__name__}({shapes}; {self.n_shards} batches)"


class InMemoryStore(_StoreBase):
    """An activation store held in RAM (for small jobs); the same interface as `ActivationStore`."""

    complete = True

    def __init__(self, batches: list[dict[str, torch.Tensor]], sites: Sequence[str], dtype: torch.dtype,
                 feature_shapes: dict[str, tuple[int, ...]], args: dict | None = None):
        self._batches = batches
        self.sites = list(sites)
        self.dtype = dtype
        self._shapes = dict(feature_shapes)
        self.shard_rows = [int(b["row"].shape[0]) for b in batches]
        self.args = dict(args or {})

    def _feature_shape(self, site: str) -> tuple[int, ...]:
        self._check_site(site)
        return () if site in INDEX else self._shapes[site]

    def _shard(self, i: int, names: Sequence[str]) -> dict[str, torch.Tensor]:
        return {k: self._batches[i][k] for k in names}


class ActivationStore(_StoreBase):
    """A harvest on disk, read lazily. `ActivationStore(path)` opens a complete store; `allow_incomplete=True` opens
    an interrupted one (its finished shards only), e.g. to inspect it."""

    def __init__(self, path, *, allow_incomplete: bool = False):
        self.path = Path(path)
        mpath = self.path / "manifest.json"
        if not mpath.exists():
            raise ResultsError(f"{self.path} is not an activation store (no manifest.json); create one with "
                               "interplab.harvest(model, inputs, sites, out_dir)")
        man = read_json(mpath)
        if man.get("format") != FORMAT:
            raise ResultsError(f"{mpath} has format {man.get('format')!r}, expected {FORMAT!r}")
        self.complete = bool(man.get("complete"))
        if not self.complete and not allow_incomplete:
            raise ResultsError(f"the activation store {self.path} is incomplete (the harvest was interrupted or is "
                               "still running); re-run the same interplab.harvest(...) call to finish it, or open it "
                               "with allow_incomplete=True to read its finished shards")
        self.manifest = man
        self.args = man["args"]
        self.sites = list(man["sites"])
        self.dtype = getattr(torch, man["dtype"])
        self._shapes = {k: tuple(v) for k, v in man["feature_shapes"].items()}
        if self.complete:
            self.shard_rows = [int(r) for r in man["shard_rows"]]
        else:
            self.shard_rows = []
            for i in range(man["n_batches"]):  # finished shards form a prefix only if written in order; stop at a gap
                p = _shard_path(self.path, i)
                if not p.exists():
                    break
                self.shard_rows.append(_rows_in(p))

    def _feature_shape(self, site: str) -> tuple[int, ...]:
        self._check_site(site)
        return () if site in INDEX else self._shapes[site]

    def _shard(self, i: int, names: Sequence[str]) -> dict[str, torch.Tensor]:
        from safetensors import safe_open

        with safe_open(str(_shard_path(self.path, i)), framework="pt") as fh:
            return {k: fh.get_tensor(k) for k in names}


def _shard_path(root: Path, i: int) -> Path:
    return root / "shards" / f"shard_{i:06d}.safetensors"


def _rows_in(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return int(fh.get_slice("row").get_shape()[0])


# ----------------------------------------------------------------------------------------------- harvesting
def _canonical(x):
    """A prompt as JSON-able data: text, token ids, or a chat conversation (a list of role/content dicts)."""
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        return {str(k): _canonical(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)) or hasattr(x, "tolist"):
        return [_canonical(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]
    return int(x) if not isinstance(x, float) else x


def _fingerprint(inputs: Sequence[Any]) -> str:
    h = hashlib.sha256()
    for x in inputs:
        h.update(json.dumps(_canonical(x)).encode())
        h.update(b"\x00")
    return h.hexdigest()


def _positions_spec(positions) -> str:
    if isinstance(positions, str):
        return positions
    if callable(positions):
        return f"callable:{getattr(positions, '__module__', '?')}.{getattr(positions, '__qualname__', repr(positions))}"
    return "list:" + hashlib.sha256(json.dumps([[int(p) for p in r] for r in positions]).encode()).hexdigest()


def _selection(batch, positions, start: int) -> torch.Tensor:
    """bool [b, width] of the tokens to keep, in the left-padded layout of `batch`."""
    mask = batch.attention_mask.bool().cpu()
    b, width = mask.shape
    if positions == "last":
        sel = torch.zeros_like(mask)
        sel[:, -1] = True
        return sel
    if positions == "all":
        return mask
    if callable(positions):
        sel = torch.as_tensor(positions(batch)).bool().cpu()
        if sel.shape != mask.shape:
            raise InputError(f"positions(batch) must return a bool mask of shape {tuple(mask.shape)} (the left-padded "
                             f"batch), got {tuple(sel.shape)}")
        return sel & mask
    sel = torch.zeros_like(mask)
    lengths = batch.lengths.cpu()
    for r in range(b):
        pos = torch.as_tensor([int(p) for p in positions[start + r]], dtype=torch.long)
        if pos.numel() and (pos.min() < 0 or pos.max() >= int(lengths[r])):
            raise InputError(f"prompt {start + r}: positions {pos.tolist()} outside its {int(lengths[r])} tokens")
        sel[r, width - int(lengths[r]) + pos] = True
    return sel


def _harvest_batch(model, chunk, start, names, positions, dtype, edits, chat=None) -> dict[str, torch.Tensor]:
    ed = edits(np.arange(start, start + len(chunk))) if callable(edits) else edits
    with torch.no_grad():
        res = model.run(list(chunk), capture=names, logits=False, edits=ed, chat=chat)
    sel = _selection(res.batch, positions, start)
    b, width = sel.shape
    lengths = res.batch.lengths.cpu()
    rows, cols = sel.nonzero(as_tuple=True)             # row-major: prompt order, then position order
    out = {s: res.cache[s].detach()[rows.to(res.cache[s].device), cols.to(res.cache[s].device)]
           .to("cpu", dtype).contiguous() for s in names}
    out["row"] = (rows + start).long()
    out["position"] = (cols - (width - lengths[rows])).long()
    return out


def harvest(model, inputs: Sequence[Any], sites: Sequence[str] | str, out_dir=None, *, batch_size: int = 32,
            positions: str | Callable | Sequence[Sequence[int]] = "last", dtype: torch.dtype | str | None = None,
            edits=None, progress: Callable[[int, int], None] | None = None, chat: bool | None = None):
    """Run `model` over `inputs` in batches and keep the activations of `sites` at the chosen positions.

    inputs: prompts (strings or token-id lists) as `LabModel.run` takes them. sites: canonical names (attn_pattern is
        not harvestable: its width changes with each batch's padding).
    out_dir: a folder for an `ActivationStore` (resumable; see the module docstring); None keeps it in RAM
        (`InMemoryStore`). batch_size: prompts per forward (= rows of prompts per shard).
    positions: "last" | "all" | callable(batch) -> bool [b, width] | per-prompt lists of positions.
    dtype: storage dtype (default float32; None is not the model's dtype on purpose: float32 is what every method
        reads). edits: Edits active during the forwards, or a callable (prompt indices) -> Edits per batch.
    progress(done_prompts, total_prompts) is called after each batch (also for skipped ones).
    chat: how strings are read, as in `LabModel.run` (False: raw text even on a chat organism)."""
    if isinstance(sites, str):
        sites = [sites]
    names = [str(s) for s in parse_sites(list(sites), model.n_layers)]
    if any(has_key_axis(s) for s in names):
        raise SiteError("attn_pattern / attn_scores cannot be harvested (their key width depends on each batch's "
                        "padding); capture them with LabModel.run, or harvest attn_z / attn_out")
    if len(set(names)) != len(names):
        raise InputError(f"duplicate sites in {names}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(positions, str) and positions not in POSITION_MODES:
        raise ConfigError(f"positions must be one of {POSITION_MODES}, a callable or per-prompt position lists; "
                          f"got {positions!r}")
    inputs = list(inputs)
    if not inputs:
        raise InputError("no inputs to harvest")
    if not isinstance(positions, str) and not callable(positions) and len(positions) != len(inputs):
        raise InputError(f"positions has {len(positions)} lists for {len(inputs)} prompts")
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else (dtype or torch.float32)
    starts = list(range(0, len(inputs), batch_size))
    args = {"model": str(getattr(model, "name", "")), "n_layers": model.n_layers, "d_model": model.d_model,
            "sites": names, "positions": _positions_spec(positions), "batch_size": batch_size,
            "dtype": str(dtype).replace("torch.", ""), "n_inputs": len(inputs), "inputs_sha256": _fingerprint(inputs),
            "edits": None if edits is None else (f"callable:{getattr(edits, '__qualname__', '?')}" if callable(edits)
                                                 else repr(list(edits)))}
    if chat is not None:  # recorded only when set, so stores harvested before the option existed still resume
        args["chat"] = chat
    with progress_protocol.task(len(inputs), "prompts", phase="harvest") as bar:   # a job's progress.json
        def report(done: int, total: int) -> None:
            bar.update(done)
            if progress is not None:
                progress(done, total)

        if out_dir is None:
            batches = []
            for i, s in enumerate(starts):
                batches.append(_harvest_batch(model, inputs[s:s + batch_size], s, names, positions, dtype, edits,
                                              chat))
                report(min(s + batch_size, len(inputs)), len(inputs))
            shapes = {k: tuple(batches[0][k].shape[1:]) for k in names}
            return InMemoryStore(batches, names, dtype, shapes, args)
        return _harvest_to_disk(model, inputs, names, Path(out_dir), starts, batch_size, positions, dtype, edits,
                                report, args, chat)


def _harvest_to_disk(model, inputs, names, root, starts, batch_size, positions, dtype, edits, progress, args,
                     chat=None):
    from safetensors.torch import save

    mpath = root / "manifest.json"
    man = {"format": FORMAT, "args": args, "sites": names, "dtype": args["dtype"], "n_batches": len(starts),
           "complete": False}
    if mpath.exists():
        old = read_json(mpath)
        if old.get("args") != args:
            diff = sorted(k for k in set(args) | set(old.get("args", {})) if old.get("args", {}).get(k) != args.get(k))
            raise HarvestMismatchError(
                f"{root} already holds a harvest made with different arguments (differs in: {', '.join(diff)}); "
                "use another out_dir, or delete that folder to start over")
        if old.get("complete"):                        # nothing left to do
            return ActivationStore(root)
        man["feature_shapes"] = old.get("feature_shapes")
    if man.get("feature_shapes") is None:
        man.pop("feature_shapes", None)
    write_json(mpath, {**man, "complete": False})       # mark incomplete before touching any shard
    shard_rows = []
    for i, s in enumerate(starts):
        path = _shard_path(root, i)
        if path.exists():                               # written atomically: if it exists, it is whole
            shard_rows.append(_rows_in(path))
        else:
            batch = _harvest_batch(model, inputs[s:s + batch_size], s, names, positions, dtype, edits, chat)
            if "feature_shapes" not in man:
                man["feature_shapes"] = {k: list(batch[k].shape[1:]) for k in names}
                write_json(mpath, {**man, "complete": False})
            write_bytes(path, save(batch, metadata={"format": FORMAT, "batch": str(i), "first_prompt": str(s)}))
            shard_rows.append(int(batch["row"].shape[0]))
            del batch
        if progress is not None:
            progress(min(s + batch_size, len(inputs)), len(inputs))
    if "feature_shapes" not in man:                     # every shard was already there (a crash before the flag)
        with_first = ActivationStore.__new__(ActivationStore)
        with_first.path = root
        man["feature_shapes"] = {k: list(with_first._shard(0, [k])[k].shape[1:]) for k in names}
    write_json(mpath, {**man, "shard_rows": shard_rows, "n_rows": int(sum(shard_rows)), "complete": True})  # last
    return ActivationStore(root)
