from interplab.interventions import Steer


def task(model, formal, casual, question, layer, scale, new_tokens):
    site = f"resid_post.{layer}"

    def mean_state(texts):  # mean over real tokens, the first (attention-sink) token left out
        return model.run(texts, capture=[site], chat=False, logits=False).cache.mean(site, skip_first=1)

    v = (mean_state(formal) - mean_state(casual)).mean(0)
    texts = {name: model.generate(question, max_new_tokens=new_tokens,
                                  edits=[Steer(site, v, positions="decode", scale=s)]).text[0]
             for name, s in (("plain", 0.0), ("steered", scale))}
    return v, texts
