"""Synthetic task generators, chat formatting, tokenizers, the offline text corpus, and real data: file and hub
reading (`files`), dataset adapters (`adapters/`), answer scoring (`scoring`), user-file columns (`user`); names
re-exported lazily."""
from __future__ import annotations

import importlib

_EXPORTS: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for n in names:
        _EXPORTS[n] = f"interplab.data.{module}"


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


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interplab.data' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
