import torch


def task(model, tokenizer, formal, casual, question, layer, scale, new_tokens):
    def mean_state(texts):  # mean over real tokens, the first (attention-sink) token left out
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="right")
        with torch.no_grad(), model.trace(dict(enc)):
            h = model.model.layers[layer].output.save()
        mask = enc.attention_mask.clone()
        mask[:, 0] = 0
        return (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    v = (mean_state(formal) - mean_state(casual)).mean(0)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                           tokenize=False)
    texts = {}
    for name, s in (("plain", 0.0), ("steered", scale)):
        with torch.no_grad(), model.generate(prompt, max_new_tokens=new_tokens, do_sample=False) as tracer:
            with tracer.iter[1:new_tokens]:  # decode steps only
                model.model.layers[layer].output = model.model.layers[layer].output + s * v
            ids = tracer.result.save()
        n = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        texts[name] = tokenizer.decode(ids[0, n:], skip_special_tokens=True)
    return v, texts
