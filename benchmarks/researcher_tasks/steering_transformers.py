import torch


def task(model, tokenizer, formal, casual, question, layer, scale, new_tokens):
    def mean_state(texts):  # mean over real tokens, the first (attention-sink) token left out
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="right")
        with torch.no_grad():
            h = model(**enc, output_hidden_states=True).hidden_states[layer + 1]
        mask = enc.attention_mask.clone()
        mask[:, 0] = 0
        return (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    v = (mean_state(formal) - mean_state(casual)).mean(0)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)

    def steer(module, args, output):  # decode steps only: under the KV cache they see one token
        h = output[0] if isinstance(output, tuple) else output
        if h.shape[1] != 1:
            return output
        h = h + scale * v
        return (h, *output[1:]) if isinstance(output, tuple) else h

    texts = {}
    for name, hooked in (("plain", False), ("steered", True)):
        handle = model.model.layers[layer].register_forward_hook(steer) if hooked else None
        try:
            with torch.no_grad():
                ids = model.generate(**prompt, max_new_tokens=new_tokens, do_sample=False)
        finally:
            if handle is not None:
                handle.remove()
        texts[name] = tokenizer.decode(ids[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    return v, texts
