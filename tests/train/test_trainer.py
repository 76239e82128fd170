"""Trainer: schedule, loss masks, determinism, resumable checkpoints, time budget, LoRA fine-tuning, checkpoints."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interplab.data.toy_tasks import TOY_TASKS, toy_mixture
from interplab.data.toy_vocab import build_toy_tokenizer
from interplab.core.errors import CheckpointError, DataError, ResultsError
from interplab.train.arch import ArchConfig, build_model
from interplab.train.config import TrainConfig, lr_lambda
from interplab.train.trainer import lm_loss, normalize_batch, train

TINY = ArchConfig(n_layers=2, d_model=32, d_mlp=64, n_heads=4, n_kv_heads=2, d_head=8, n_ctx=64)


@pytest.fixture(scope="module")
def tok():
    return build_toy_tokenizer()


def tiny(tok, seed=0):
    return build_model(TINY, tok, seed=seed)


def mix(seed=0, bs=8):
    return toy_mixture({t: 1.0 for t in TOY_TASKS}, batch_size=bs, seed=seed)


def quiet(**kw):
    kw.setdefault("progress", False)
    kw.setdefault("log_every", 5)
    return TrainConfig(**kw)


def test_schedule_warmup_cosine():
    cfg = TrainConfig(steps=100, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_lambda(0, cfg) == pytest.approx(0.1)
    assert lr_lambda(9, cfg) == pytest.approx(1.0)
    assert lr_lambda(10, cfg) == pytest.approx(1.0)
    assert lr_lambda(55, cfg) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_lambda(100, cfg) == pytest.approx(0.1)
    vals = [lr_lambda(s, cfg) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(vals, vals[1:]))


def test_loss_mask_counts_answer_tokens_only(tok):
    torch.manual_seed(0)
    model = tiny(tok)
    batch = mix()(0)
    b = normalize_batch(batch)
    loss, n = lm_loss(model, b)
    logits = model(input_ids=batch["input_ids"]).logits.detach()
    # independent reference: per-token log-softmax, gathered, averaged over answer positions only
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    m = batch["loss_mask"][:, 1:]
    cnt = int(m.sum())
    assert n == cnt and float(loss.detach()) == pytest.approx(float(-(logp * m).sum() / cnt), rel=1e-5)
    assert cnt < int(batch["attention_mask"][:, 1:].sum())
    # prompt tokens do not matter for the loss targets: without a mask every non-pad token counts
    b_all = normalize_batch({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
    assert int(b_all["targets_mask"][:, 1:].sum()) > n
    with pytest.raises(DataError):
        normalize_batch({"ids": 1})


def test_same_seed_identical_first_20_losses(tok):
    runs = []
    for _ in range(2):
        model = tiny(tok, seed=3)
        runs.append(train(model, mix(seed=3), quiet(steps=20, seed=3, warmup_steps=5)).losses)
    assert runs[0] == runs[1]
    other = train(tiny(tok, seed=4), mix(seed=4), quiet(steps=20, seed=4, warmup_steps=5)).losses
    assert other != runs[0]
    assert np.mean(runs[0][-5:]) < np.mean(runs[0][:5])  # it learns


def test_resume_is_exact(tok, tmp_path):
    src = mix(seed=1)
    cfg = quiet(steps=12, warmup_steps=3, checkpoint_every=4, seed=1)
    ref_model = tiny(tok, seed=1)
    ref = train(ref_model, src, cfg, out_dir=tmp_path / "ref")

    class Crash(Exception):
        pass

    def crashing(step):
        if step == 9:
            raise Crash
        return src(step)

    model = tiny(tok, seed=1)
    with pytest.raises(Crash):
        train(model, crashing, cfg, out_dir=tmp_path / "run")
    assert (tmp_path / "run" / "checkpoints" / "step_8").is_dir()
    model2 = tiny(tok, seed=99)  # weights come from the checkpoint
    res = train(model2, src, cfg, out_dir=tmp_path / "run", resume=True)
    assert res.resumed_from == 8 and res.losses == ref.losses
    for (k, a), (_, b) in zip(ref_model.state_dict().items(), model2.state_dict().items()):
        assert torch.equal(a, b), k


def test_iterable_and_tensor_batches(tok):
    src = mix(seed=2)
    batches = (src(s) for s in range(6))
    res = train(tiny(tok), batches, quiet(steps=6, warmup_steps=2))
    assert len(res.losses) == 6
    ids = torch.randint(6, len(tok), (4, 12))
    res2 = train(tiny(tok), [ids] * 3, quiet(steps=3, warmup_steps=1))
    assert res2.steps_done == 3 and res2.tokens == 3 * ids.numel()


def test_time_budget_completes_schedule(tok):
    from interplab.train.config import _progress_step

    cfg = quiet(steps=1000, warmup_steps=10, time_budget_s=100.0, log_every=1000)
    assert _progress_step(5, 0.0, cfg) == 5.0
    assert _progress_step(5, 50.0, cfg) == 500.0  # half the time gone -> half-way through the schedule
    assert _progress_step(700, 50.0, cfg) == 700.0
    assert lr_lambda(_progress_step(5, 100.0, cfg), cfg) == pytest.approx(cfg.min_lr_ratio)
    cfg = quiet(steps=10_000, warmup_steps=1, time_budget_s=1.0, log_every=1000)
    res = train(tiny(tok), mix(), cfg)
    assert 1 <= res.steps_done < 10_000 and not res.stopped_early
    assert res.log[-1]["lr"] < cfg.lr


def test_grad_clip_bounds_update(tok):
    # with a tiny clip the first AdamW step is still lr-sized, but the clipped grad norm is what the optimiser sees
    model = tiny(tok)
    b = normalize_batch(mix()(0))
    loss, _ = lm_loss(model, b)
    loss.backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    after = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters() if p.grad is not None))
    assert float(total) > 1e-3 and after == pytest.approx(1e-3, rel=1e-3)


def test_save_validate_and_corruption(tok, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interplab.models.checkpoints import validate_checkpoint
    from interplab.train.checkpoint import load_checkpoint, save_checkpoint

    model = tiny(tok)
    d = save_checkpoint(model, tok, tmp_path / "ck", train_info={"x": 1})
    for f in ("config.json", "model.safetensors", "tokenizer.json", "checksums.json", "interplab_train.json"):
        assert (d / f).is_file(), f
    m2 = AutoModelForCausalLM.from_pretrained(d)
    t2 = AutoTokenizer.from_pretrained(d)
    assert t2.chat_template and t2.get_vocab() == tok.get_vocab()
    ids = torch.tensor([[1, 10, 11, 12]])
    assert torch.equal(model(input_ids=ids).logits, m2(input_ids=ids).logits)
    load_checkpoint(d)
    with pytest.raises(ResultsError):
        save_checkpoint(model, tok, d)  # never replaced silently
    w = d / "model.safetensors"
    data = w.read_bytes()
    # flipped bytes (same size): caught by the checksum
    w.write_bytes(data[:-8] + bytes(8))
    with pytest.raises(CheckpointError, match="sha256"):
        validate_checkpoint(d)
    # truncated: caught by the safetensors header check even without checksums
    w.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated|corrupt"):
        validate_checkpoint(d, verify_checksums=False)
    w.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        validate_checkpoint(d)


def test_lora_on_chosen_layers(tok, tmp_path):
    from transformers import AutoModelForCausalLM

    from interplab.train.finetune import LoraSpec, apply_lora, finetune

    base = tiny(tok)
    ids = torch.tensor([[1, 10, 11, 12, 13]])
    base_logits = base(input_ids=ids).logits.detach().clone()
    peft_model = apply_lora(tiny(tok), LoraSpec(r=4, layers=(1,)))
    assert torch.allclose(peft_model(input_ids=ids).logits, base_logits, atol=1e-6)  # B = 0 init
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n and ".layers.1." in n for n in names)
    n_expected = sum(4 * (m.in_features + m.out_features) for n, m in tiny(tok).named_modules()
                     if ".layers.1." in n and n.split(".")[-1] in LoraSpec().target_modules)
    assert sum(p.numel() for n, p in peft_model.named_parameters() if p.requires_grad) == n_expected
    # fine-tune, merge, save as a plain checkpoint
    ck = tmp_path / "lora"
    torch.manual_seed(0)
    src_model = tiny(tok)
    before = {k: v.clone() for k, v in src_model.state_dict().items()}
    model, _, res = finetune(src_model, mix(), quiet(steps=4, warmup_steps=1, lr=1e-2),
                             lora=LoraSpec(r=4, layers=(1,)), out_dir=ck, tokenizer=tok)
    assert res.steps_done == 4
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(".layers.1." in k for k in changed)
    re = AutoModelForCausalLM.from_pretrained(ck)
    assert not any("lora" in k for k in re.state_dict())
    assert torch.allclose(re(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-6)
    # full fine-tuning of a saved checkpoint
    model3, tok3, res3 = finetune(ck, mix(), quiet(steps=2, warmup_steps=1), out_dir=tmp_path / "full")
    assert res3.steps_done == 2 and (tmp_path / "full" / "model.safetensors").is_file() and tok3 is not None
