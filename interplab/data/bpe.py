"""A byte-level BPE tokenizer trained locally with `tokenizers` (seconds), saved as an ordinary HF tokenizer.

Special tokens match the word-level organisms: <pad>=0, <bos>=1, <eos>=2, <unk>=3, <|im_start|>=4, <|im_end|>=5;
<bos> is prepended when called with add_special_tokens=True; the ChatML `chat_template` is attached.
"""
from __future__ import annotations

from typing import Iterable

from interplab.data.chat import CHAT_TEMPLATE
from interplab.data.tokenizers import BOS, EOS, PAD, SPECIAL_TOKENS, UNK


def train_bpe(texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2, add_bos: bool = True):
    """Train a byte-level BPE with `vocab_size` entries (incl. the 256 byte symbols and the special tokens) on
    `texts` and return a `PreTrainedTokenizerFast` (deterministic for the same texts)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(list(texts), trainer=trainer)
    bos_id = tk.token_to_id(BOS)
    if add_bos:
        tk.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                          special_tokens=[(BOS, bos_id)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
                                  additional_special_tokens=list(SPECIAL_TOKENS[4:]), padding_side="left")
    tok.chat_template = CHAT_TEMPLATE
    return tok
