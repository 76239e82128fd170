"""interplab quickstart: load a model organism, capture activations, steer generation, save and export a figure.

    python examples/quickstart.py                     # the default organism, zoo:toy-chat
    python examples/quickstart.py --model PATH        # any local Hugging Face checkpoint directory
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

import interplab
from interplab.interventions import Ablate, Steer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="zoo:toy-chat")
    ap.add_argument("--backend", default="bridge", choices=["bridge", "nnsight"])
    ap.add_argument("--out", default=None, help="where to write the figure (default: a temp dir)")
    args = ap.parse_args(argv)

    m = interplab.load_model(args.model, backend=args.backend, device="cpu")
    print(m)

    # 1. Capture: one residual stream and per-head outputs, read at each prompt's last real token.
    prompts = _prompts(m)
    out = m.run(prompts, capture=[f"resid_post.{m.n_layers // 2}", "attn_z.0"])
    h = out.cache.last(f"resid_post.{m.n_layers // 2}")
    print("residual at last token:", tuple(h.shape), "| attn_z.0:", tuple(out.cache["attn_z.0"].shape))

    # 2. Intervene: steer along the difference of the two prompts' states, only while decoding.
    v = (h[0] - h[1])
    plain = m.generate(prompts, max_new_tokens=8)
    steered = m.generate(prompts, max_new_tokens=8,
                         edits=[Steer(f"resid_post.{m.n_layers // 2}", v, positions="decode", scale=2.0)])
    ablated = m.generate(prompts, max_new_tokens=8, edits=[Ablate("attn_z.0", heads=[0])])
    for i, p in enumerate(prompts):
        print(f"{p!r}\n  plain:   {plain.text[i]!r}\n  steered: {steered.text[i]!r}\n  head 0.0 ablated: {ablated.text[i]!r}")

    # 3. A figure, exported offline.
    from interplab.figures import export
    from interplab.figures.models import attention_figure

    pattern = m.run(prompts[0], capture=["attn_pattern.0"]).cache["attn_pattern.0"][0, 0]
    tokens = [m.tokenizer.decode([t]) for t in m.tokenize(prompts[0]).input_ids[0].tolist()]   # the ids run() saw
    fig = attention_figure(pattern.numpy(), tokens, layer=0, head=0)
    path = Path(args.out or tempfile.mkdtemp(prefix="interplab_quickstart_")) / "attention.html"
    export(fig, path)
    print("figure:", path)
    return 0


def _prompts(m) -> list:
    """Two prompts the model's tokenizer knows: chat conversations on a chat model (rendered by its own chat
    template inside run/generate), plain text otherwise (docs/hook_layer.md, "Prompts: text and chat")."""
    if m.name == "zoo:toy-chat":   # the organism's own task format: instruction = system turn, input = user turn
        return [[{"role": "system", "content": "copy"}, {"role": "user", "content": "s1 s2 s3 sep"}],
                [{"role": "system", "content": "rev"}, {"role": "user", "content": "s4 s5 s6 sep"}]]
    vocab = [w for w, _ in sorted(m.tokenizer.get_vocab().items(), key=lambda kv: kv[1]) if not w.startswith("<")]
    words = vocab[3:9] if len(vocab) > 9 else vocab
    texts = [" ".join(words[:3]), " ".join(words[3:5])]
    if m.chat_default:
        return [[{"role": "user", "content": t}] for t in texts]
    return texts


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
