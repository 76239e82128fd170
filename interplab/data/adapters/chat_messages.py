"""Chat data in `messages` form for FAST vs block SAE training (fast_sae.md §2.1).

The paper's corpus is WildChat-1M-Full, Infinity-Instruct, tulu-3-sft-mixture, orca-agentinstruct-1M-v1-cleaned and
lmsys-chat-1m (+ the Pile for BT(P)). Their row schemas differ; `to_messages` maps each to a list of
{"role", "content"} dicts, which the model's own chat template renders (one dialogue per forward, FAST):

* `messages`: [{"role", "content"}, ...] (tulu-3-sft-mixture, orca-agentinstruct cleaned; a JSON string is parsed)
* `conversation`: [{"role", "content", ...}, ...] (WildChat, lmsys-chat-1m; extra keys dropped)
* `conversations`: [{"from": human|gpt|system, "value"}, ...] (ShareGPT style, Infinity-Instruct)
* flat `user` / `assistant` (and optional `system`) columns: a one-turn dialogue (the CSV form of a user file)

Plain text for BT(P) (`monology/pile-uncopyrighted`, field `text`) is read by `interplab.data.adapters.text_corpus`.
"""
from __future__ import annotations

import json
from typing import Iterator

from interplab.core.errors import DataError
from interplab.data.files import open_source

__all__ = ["CHAT_SOURCES", "to_messages", "chat_dialogues"]

#: name -> (hub id, config, split)
CHAT_SOURCES = {
    "tulu-3-sft-mixture": ("allenai/tulu-3-sft-mixture", None, "train"),
    "wildchat": ("allenai/WildChat-1M-Full", None, "train"),
    "lmsys-chat-1m": ("lmsys/lmsys-chat-1m", None, "train"),
    "infinity-instruct": ("BAAI/Infinity-Instruct", "0625", "train"),
    "orca-agentinstruct-cleaned": ("mlabonne/orca-agentinstruct-1M-v1-cleaned", None, "train"),
}
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "system": "system", "bot": "assistant"}


def _turns(raw, i: int, key: str) -> list:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise DataError(f"row {i}: {key!r} is a string but not JSON") from None
    if not isinstance(raw, (list, tuple)) or not raw:
        raise DataError(f"row {i}: {key!r} must be a non-empty list of turns")
    return list(raw)


def to_messages(row: dict, i: int = 0) -> list[dict]:
    """One source row -> [{"role", "content"}, ...] (module doc lists the schemas)."""
    for key in ("messages", "conversation"):
        if key in row and row[key] is not None:
            out = []
            for t in _turns(row[key], i, key):
                if not isinstance(t, dict) or "role" not in t or "content" not in t:
                    raise DataError(f"row {i}: every {key!r} turn needs 'role' and 'content', got {t!r:.80}")
                out.append({"role": str(t["role"]), "content": str(t["content"])})
            return out
    if "conversations" in row:
        out = []
        for t in _turns(row["conversations"], i, "conversations"):
            role = _SHAREGPT_ROLES.get(str(t.get("from", "")).lower())
            if role is None or "value" not in t:
                raise DataError(f"row {i}: a ShareGPT turn needs 'from' in {sorted(_SHAREGPT_ROLES)} and 'value'")
            out.append({"role": role, "content": str(t["value"])})
        return out
    if "user" in row and "assistant" in row:
        sys = [{"role": "system", "content": str(row["system"])}] if row.get("system") else []
        return sys + [{"role": "user", "content": str(row["user"])},
                      {"role": "assistant", "content": str(row["assistant"])}]
    raise DataError(f"row {i} has no chat field: expected 'messages', 'conversation', 'conversations' or "
                    f"'user' + 'assistant' columns; has {sorted(row)}")


def chat_dialogues(source="tulu-3-sft-mixture", *, split: str | None = None, limit: int | None = None,
                   seed: int | None = None) -> Iterator[list[dict]]:
    """Dialogues (message lists) from a named chat source (CHAT_SOURCES), another hub id or a local file."""
    hub, config, default_split = CHAT_SOURCES.get(str(source), (None, None, "train"))
    src = None if hub else source
    rows = open_source(src, hub=hub, config=config, split=split or default_split, limit=limit, seed=seed,
                       file_split=split is not None)
    for i, row in enumerate(rows):
        yield to_messages(row, i)
