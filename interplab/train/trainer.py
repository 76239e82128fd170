"""A small causal-LM trainer for Hugging Face models.

AdamW, linear warm-up then cosine decay to `min_lr_ratio` of the peak, loss masks (only answer tokens count when a
batch carries `loss_mask`), gradient clipping, seeding, resumable checkpoints every N steps and a tqdm progress bar
showing loss and tokens/s.

Data can be anything that yields token batches:
- a callable `source(step) -> batch` (preferred: a resumed run sees exactly the batches it would have seen; e.g.
  `interplab.data.examples.TaskMixture`),
- an iterable/iterator of batches (on resume the first `step` batches are skipped),
- a batch is a dict with `input_ids` [B,T] and optionally `attention_mask` [B,T] and `loss_mask` [B,T] (True where
  token t is a target), or `labels` [B,T] with -100 for ignored tokens; or a plain LongTensor [B,T] (every token
  is a target).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from interplab.core.errors import ConfigError, DataError, ShapeError


from interplab.train.config import TrainConfig, TrainResult, _progress_step, lr_lambda  # noqa: E402,F401


def make_optimizer(model, cfg: TrainConfig):
    decay, no_decay = [], []
    emb_ids = set()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Embedding):
            emb_ids.add(id(mod.weight))
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and id(p) not in emb_ids else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_lambda(s, cfg))
    return opt, sched


def _set_lr(opt, mult: float, cfg: TrainConfig) -> None:
    for g in opt.param_groups:
        g["lr"] = cfg.lr * mult


def normalize_batch(batch: Any) -> dict:
    """-> {input_ids, attention_mask, targets_mask} with targets_mask[b,t] = token t is a target."""
    if isinstance(batch, torch.Tensor):
        batch = {"input_ids": batch}
    if not isinstance(batch, dict) or "input_ids" not in batch:
        raise DataError("a training batch must be a LongTensor [B,T] or a dict with 'input_ids' "
                        "(+ optional 'attention_mask', 'loss_mask' or 'labels')")
    ids = torch.as_tensor(batch["input_ids"])
    if ids.ndim != 2:
        raise ShapeError(f"input_ids must be [batch, seq], got shape {tuple(ids.shape)}")
    att = batch.get("attention_mask")
    att = torch.ones_like(ids) if att is None else torch.as_tensor(att)
    if att.shape != ids.shape:
        raise ShapeError(f"attention_mask {tuple(att.shape)} must match input_ids {tuple(ids.shape)}")
    if batch.get("loss_mask") is not None:
        tm = torch.as_tensor(batch["loss_mask"]).bool()
    elif batch.get("labels") is not None:
        tm = torch.as_tensor(batch["labels"]) != -100
    else:
        tm = torch.ones_like(ids, dtype=torch.bool)
    if tm.shape != ids.shape:
        raise ShapeError(f"loss_mask/labels {tuple(tm.shape)} must match input_ids {tuple(ids.shape)}")
    return {"input_ids": ids.long(), "attention_mask": att.long(), "targets_mask": tm & att.bool()}


def _right_padded(att: torch.Tensor) -> bool:
    # every row is 1...1 0...0: causal attention alone is then exact for the real tokens
    return bool((att[:, 1:] <= att[:, :-1]).all())


def lm_loss(model, batch: dict, autocast_bf16: bool = False) -> tuple[torch.Tensor, int]:
    """Mean next-token cross-entropy over target tokens; returns (loss, number of target tokens)."""
    ids, att, tm = batch["input_ids"], batch["attention_mask"], batch["targets_mask"]
    dev = next(model.parameters()).device
    ids, att, tm = ids.to(dev), att.to(dev), tm.to(dev)
    kw = {} if _right_padded(att) else {"attention_mask": att}
    ctx = torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if autocast_bf16 else _null()
    with ctx:
        logits = model(input_ids=ids, **kw).logits
    logits = logits[:, :-1].float()
    tgt = ids[:, 1:]
    m = tm[:, 1:]
    n = int(m.sum())
    if n == 0:
        raise DataError("a batch has no target tokens (empty loss mask)")
    loss = torch.nn.functional.cross_entropy(logits[m], tgt[m])
    return loss, n


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _source_fn(data) -> tuple[Callable[[int], Any] | None, Iterable | None]:
    if callable(data) and not hasattr(data, "__next__"):
        return data, None
    if hasattr(data, "__iter__"):
        return None, data
    raise DataError("training data must be a callable step -> batch or an iterable of batches")


# ---------------------------------------------------------------------------------------------- checkpoints
STATE_FILE = "trainer_state.json"


def _ckpt_dirs(out_dir: Path) -> list[Path]:
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return []
    ds = [d for d in root.iterdir() if d.is_dir() and d.name.startswith("step_") and (d / STATE_FILE).exists()]
    return sorted(ds, key=lambda d: int(d.name.split("_")[1]))


def save_resumable(out_dir, model, opt, sched, step: int, result: TrainResult, cfg: TrainConfig) -> Path:
    """Write checkpoints/step_{step}/ (model + optimiser + scheduler + rng + losses) atomically."""
    from safetensors.torch import save_file

    from interplab.core.io import write_json

    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    # tied weights appear twice in state_dict; safetensors refuses shared storage
    seen: dict[int, str] = {}
    for k in list(sd):
        ptr = sd[k].data_ptr()
        if ptr in seen:
            sd[k] = sd[k].clone()
        seen[ptr] = k
    save_file(sd, str(tmp / "model.safetensors"))
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "torch_rng": torch.get_rng_state()}, tmp / "optimizer.pt")
    write_json(tmp / STATE_FILE, {"step": step, "config": cfg.to_dict(), "result": result.to_dict()})
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in _ckpt_dirs(out_dir)[:-max(1, cfg.keep_checkpoints)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_resumable(ckpt: Path, model, opt, sched) -> tuple[int, TrainResult]:
    from safetensors.torch import load_file

    from interplab.core.io import read_json

    sd = load_file(str(ckpt / "model.safetensors"))
    model.load_state_dict(sd, strict=True)
    st = torch.load(ckpt / "optimizer.pt", weights_only=True)
    opt.load_state_dict(st["optimizer"])
    sched.load_state_dict(st["scheduler"])
    torch.set_rng_state(st["torch_rng"])
    meta = read_json(ckpt / STATE_FILE)
    res = TrainResult(**{k: v for k, v in meta["result"].items() if k in TrainResult.__dataclass_fields__})
    return int(meta["step"]), res


# ---------------------------------------------------------------------------------------------- training loop
def train(model, data, config: TrainConfig | None = None, *, out_dir=None, resume: bool = False,
          eval_fn: Callable[[Any, int], dict] | None = None, log_fn: Callable[[dict], None] | None = None,
          desc: str = "train") -> TrainResult:
    """Train `model` in place on `data` (see module docstring) and return a `TrainResult`.

    out_dir: where resumable checkpoints go (`out_dir/checkpoints/step_N`). resume: continue from the latest one
    there (exactly: same batches for a step-indexed source, same optimiser/scheduler state).
    eval_fn(model, step) -> dict of metrics, called every `eval_every` steps and at the end (model in eval mode).
    log_fn(record): called with each log record (e.g. to append to a file).
    """
    cfg = (config or TrainConfig()).validate()
    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    if cfg.checkpoint_every and out_dir is None:
        raise ConfigError("checkpoint_every needs out_dir")
    torch.manual_seed(cfg.seed)
    source, iterable = _source_fn(data)
    opt, sched = make_optimizer(model, cfg)
    start = 0
    result = TrainResult()
    if resume and out_dir is not None:
        ck = _ckpt_dirs(Path(out_dir))
        if ck:
            start, result = load_resumable(ck[-1], model, opt, sched)
            result.resumed_from = start
    it = None
    if iterable is not None:
        it = iter(iterable)
        for _ in range(start):
            next(it)
    model.train()
    bar = None
    if cfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=start, desc=desc, dynamic_ncols=True, mininterval=1.0)
    t0 = time.perf_counter()
    seconds0 = result.seconds
    tokens_window, t_window = 0, time.perf_counter()
    lr_used = opt.param_groups[0]["lr"]
    for step in range(start, cfg.steps):
        if cfg.time_budget_s:
            pos = _progress_step(step, seconds0 + time.perf_counter() - t0, cfg)
            if pos >= cfg.steps:
                break
            _set_lr(opt, lr_lambda(pos, cfg), cfg)
        lr_used = opt.param_groups[0]["lr"]
        batch = source(step) if source is not None else next(it)
        b = normalize_batch(batch)
        loss, _ = lm_loss(model, b, cfg.autocast_bf16)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip and cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        lv = float(loss.detach())
        if not math.isfinite(lv):
            raise DataError(f"loss became {lv} at step {step}; lower the lr or check the data")
        result.losses.append(lv)
        ntok = int(b["attention_mask"].sum())
        result.tokens += ntok
        tokens_window += ntok
        done = step + 1
        result.steps_done = done
        if bar is not None:
            bar.update(1)
        if done % max(1, cfg.log_every) == 0 or done == cfg.steps:
            now = time.perf_counter()
            tps = tokens_window / max(1e-9, now - t_window)
            tokens_window, t_window = 0, now
            window = result.losses[-max(1, cfg.log_every):]
            rec = {"step": done, "loss": sum(window) / len(window), "lr": lr_used,
                   "tokens_per_s": tps, "elapsed_s": seconds0 + now - t0}
            if eval_fn is not None and cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
                model.eval()
                with torch.no_grad():
                    rec.update(eval_fn(model, done))
                model.train()
            result.log.append(rec)
            if bar is not None:
                bar.set_postfix(loss=f"{rec['loss']:.4f}", tok_s=f"{tps:,.0f}")
            if log_fn is not None:
                log_fn(rec)
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
            result.seconds = seconds0 + time.perf_counter() - t0
            save_resumable(out_dir, model, opt, sched, done, result, cfg)
        if cfg.max_time_s is not None and seconds0 + time.perf_counter() - t0 > cfg.max_time_s:
            result.stopped_early = done < cfg.steps
            break
    if bar is not None:
        bar.close()
    if cfg.time_budget_s and result.steps_done < cfg.steps:
        result.stopped_early = False  # the time-budgeted schedule completed its decay
        if not result.log or result.log[-1]["step"] != result.steps_done:
            window = result.losses[-max(1, cfg.log_every):]
            rec = {"step": result.steps_done, "loss": sum(window) / max(1, len(window)),
                   "lr": lr_used, "tokens_per_s": 0.0, "elapsed_s": seconds0 + time.perf_counter() - t0}
            if eval_fn is not None and cfg.eval_every:
                model.eval()
                with torch.no_grad():
                    rec.update(eval_fn(model, result.steps_done))
            result.log.append(rec)
            if log_fn is not None:
                log_fn(rec)
    result.seconds = seconds0 + time.perf_counter() - t0
    result.tokens_per_s = result.tokens / max(1e-9, result.seconds)
    model.eval()
    return result


def write_log(path) -> Callable[[dict], None]:
    """A `log_fn` appending JSON lines to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def _w(rec: dict) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
    return _w
