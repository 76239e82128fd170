import torch
import torch.nn.functional as F


def task(model, tokens, T, top_k):
    cfg = model.config
    n_heads, d_head = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    layers = model.model.layers
    model._module.set_attn_implementation("eager")  # SDPA returns no attention weights
    patterns = []
    with model.trace(tokens):
        for i in range(len(layers)):
            patterns.append(layers[i].self_attn.output[1].save())
    scores = torch.stack([a.detach().diagonal(offset=-(T - 1), dim1=-2, dim2=-1)[..., 1:].mean((0, 2)) for a in patterns])
    model._module.set_attn_implementation("sdpa")
    top = [divmod(int(i), n_heads) for i in scores.flatten().argsort(descending=True)[:top_k]]
    by_layer = {}
    for layer, head in top:
        by_layer.setdefault(layer, []).append(head)
    with model.trace(tokens):
        for layer in sorted(by_layer):
            x = layers[layer].self_attn.o_proj.input
            b, p, _ = x.shape
            x = x.view(b, p, n_heads, d_head).clone()
            x[:, :, by_layer[layer]] = 0
            layers[layer].self_attn.o_proj.input = x.view(b, p, -1)
        ablated = model.output.logits.save()
    with model.trace(tokens):
        clean = model.output.logits.save()

    def loss(logits):
        return float(F.cross_entropy(logits[:, T:-1].reshape(-1, logits.shape[-1]), tokens[:, T + 1:].reshape(-1)))

    return scores.numpy(), top, loss(clean), loss(ablated)
