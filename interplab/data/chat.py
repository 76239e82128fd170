"""ChatML-style chat formatting shared by the organisms, the SAE pipeline and the app.

The template is stored on every organism tokenizer as `chat_template`, so `tokenizer.apply_chat_template` renders
the same ids here and on a researcher's machine."""
from __future__ import annotations

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ROLES = ("system", "user", "assistant")

# Whitespace-separated on purpose: organism tokenizers are word-level and split on whitespace.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|> {{ message['role'] }} {{ message['content'] }} <|im_end|> "
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def render_chat(messages: list[dict], add_generation_prompt: bool = False) -> str:
    """Render messages exactly as CHAT_TEMPLATE does (used where no tokenizer is at hand)."""
    from interplab.core.errors import InputError

    parts = []
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") not in ROLES or "content" not in msg:
            raise InputError(f"chat message {msg!r} must be a dict with role in {ROLES} and a 'content' string")
        parts.append(f"{IM_START} {msg['role']} {msg['content']} {IM_END} ")
    if add_generation_prompt:
        parts.append(f"{IM_START} assistant ")
    return "".join(parts)
