"""Exact-match evaluation: one teacher-forced forward pass (ours) vs greedy `generate` per example (anchor).

Prints one BENCH line. Needs the shipped toy-base weights."""
from __future__ import annotations

import time

import torch


def main(n_per_task: int = 10) -> None:
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM

    from interplab.data.examples import encode, sample_examples
    from interplab.data.toy_tasks import TOY_TASKS, toy_task_fns
    from interplab.data.toy_vocab import toy_vocab
    from interplab.train.evaluate import exact_match, greedy_generate_answer
    from interplab.zoo import resolve

    model = AutoModelForCausalLM.from_pretrained(resolve("toy-base")).eval()
    V = toy_vocab()
    fns = toy_task_fns()
    exs = [ex for t in TOY_TASKS for ex in sample_examples(fns[t], n_per_task, seed=3, split="test")]
    exact_match(model, exs[:4], V)  # warm-up
    t0 = time.perf_counter()
    ours = exact_match(model, exs, V)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    anchor = [list(encode(e, V).ids[encode(e, V).prompt_len:]) == greedy_generate_answer(model, e, V) for e in exs]
    t_anchor = time.perf_counter() - t0
    same = ours.tolist() == anchor
    ratio = t_anchor / t_ours
    print(f"BENCH name=exact_match_teacher_forced ours={t_ours:.3f} anchor={t_anchor:.3f} ratio={ratio:.1f} "
          f"goal=>=20x_and_identical ok={same and ratio >= 20} extra=n={len(exs)},identical={same},"
          f"acc={ours.mean():.3f}")


if __name__ == "__main__":
    main()
