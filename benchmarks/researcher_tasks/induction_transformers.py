import torch
import torch.nn.functional as F


def task(model, tokens, T, top_k):
    cfg = model.config
    n_heads, d_head = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    model.set_attn_implementation("eager")  # SDPA returns no attention weights
    with torch.no_grad():
        out = model(tokens, output_attentions=True)
    scores = torch.stack([a.diagonal(offset=-(T - 1), dim1=-2, dim2=-1)[..., 1:].mean((0, 2))
                          for a in out.attentions])
    model.set_attn_implementation("sdpa")
    top = [divmod(int(i), n_heads) for i in scores.flatten().argsort(descending=True)[:top_k]]

    def zero_heads(heads):
        def hook(module, args):
            x = args[0].clone()
            b, p, _ = x.shape
            x = x.view(b, p, n_heads, d_head)
            x[:, :, heads] = 0
            return (x.view(b, p, -1),)
        return hook

    by_layer = {}
    for layer, head in top:
        by_layer.setdefault(layer, []).append(head)
    handles = [model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero_heads(h))
               for layer, h in by_layer.items()]
    try:
        with torch.no_grad():
            ablated = model(tokens).logits
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        clean = model(tokens).logits

    def loss(logits):  # the second half: targets T+1 .. 2T-1, predicted at T .. 2T-2
        return float(F.cross_entropy(logits[:, T:-1].reshape(-1, logits.shape[-1]), tokens[:, T + 1:].reshape(-1)))

    return scores.numpy(), top, loss(clean), loss(ablated)
