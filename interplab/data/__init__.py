"""Synthetic task generators, chat formatting, tokenizers, the offline text corpus, and real data: file and hub
reading (`files`), dataset adapters (`adapters/`), answer scoring (`scoring`), user-file columns (`user`); names
re-exported lazily."""
from __future__ import annotations

from interplab.core.lazy import LazyExports

_lazy = LazyExports(__name__)
_export = _lazy.add


_export("examples", "Example", "encode", "collate", "TaskMixture", "sample_examples", "is_heldout")
_export("ctxmem", "CtxMem", "CtxMemConfig", "memory_map")
_export("multitask", "Multitask")
_export("concepts", "Concepts", "concept_token_set")
_export("toy_tasks", "toy_task_fns", "toy_mixture", "TOY_TASKS")
_export("toy_vocab", "build_toy_tokenizer", "toy_vocab")
_export("corpus", "load_corpus")
_export("bpe", "train_bpe")
_export("chat", "CHAT_TEMPLATE", "render_chat", "IM_START", "IM_END")
_export("tokenizers", "build_word_tokenizer")
_export("files", "read_records", "open_source", "load_hub", "require_columns", "preview", "HubUnavailableError",
        "hub_offline")
_export("user", "USER_COLUMNS", "check_user_file", "user_records")
_export("scoring", "parse_halueval", "halueval_metrics", "parse_final_answer", "answer_correct")


__getattr__, __dir__ = _lazy.hooks(globals())


__all__ = _lazy.names()
