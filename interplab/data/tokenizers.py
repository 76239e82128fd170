"""Word-level tokenizers for model organisms and random test checkpoints, saved as ordinary HF tokenizers."""
from __future__ import annotations

from typing import Iterable

from interplab.data.chat import CHAT_TEMPLATE, IM_END, IM_START

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, IM_START, IM_END)


def build_word_tokenizer(words: Iterable[str], *, chat: bool = True, add_bos: bool = True):
    """A whitespace word-level `PreTrainedTokenizerFast`.

    Ids: <pad>=0, <bos>=1, <eos>=2, <unk>=3, <|im_start|>=4, <|im_end|>=5, then `words` in order. With `add_bos`
    the tokenizer prepends <bos> when called with add_special_tokens=True (the HF default), like Llama's.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for w in (*SPECIAL_TOKENS, *words):
        if w not in vocab:
            vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if add_bos:
        tk.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
        )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        additional_special_tokens=[IM_START, IM_END], padding_side="left",
    )
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok
