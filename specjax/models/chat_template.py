"""Chat templates: ChatML rendered natively, any other Jinja template through ``jinja2``."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence

# A literal default system prompt inside the template (no Jinja expressions or quotes in it).
_CHATML_SYSTEM = re.compile(
    r"<\|im_start\|>system(?:\n|\\n)((?:[^'\"{}\\]|\\.)*?)<\|im_end\|>", re.S
)


def is_chatml(template: str) -> bool:
    """Whether ``template`` is a plain ChatML template that :func:`render_chat_template` renders
    natively (im_start / im_end markers, no tool calling)."""
    return "<|im_start|>" in template and "<|im_end|>" in template and "tool" not in template


def render_chat_template(
    template: str | None,
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool = True,
    specials: Mapping[str, str | None] | None = None,
) -> str:
    """Renders ``messages`` with a chat template (ChatML natively, others with jinja2).

    ChatML: every message becomes ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; when the template
    carries a default system prompt (SmolLM2's "You are a helpful AI assistant named SmolLM...")
    it is prepended if the conversation does not start with a system message; the generation
    prompt is ``<|im_start|>assistant\\n``. Other templates see what transformers gives them:
    ``messages``, ``add_generation_prompt``, the ``specials`` (``bos_token``, ``eos_token``),
    ``raise_exception``, ``strftime_now`` and the ``loopcontrols`` extension.

    Raises:
      ValueError: no template, malformed messages, or a non-ChatML template without jinja2.
    """
    if not template:
        raise ValueError(
            "this tokenizer has no chat template; format the prompt yourself or load a model "
            "whose tokenizer carries one"
        )
    for m in messages:
        if not isinstance(m, Mapping) or not {"role", "content"} <= set(m):
            raise ValueError(f"chat messages need 'role' and 'content' keys, got {m!r}")
    if is_chatml(template):
        return _render_chatml(template, messages, add_generation_prompt)
    try:
        import jinja2.sandbox  # optional dependency
    except ImportError:
        raise ValueError(
            "this chat template is not ChatML, which is the only kind specjax renders natively; "
            "`pip install jinja2` to render any Jinja chat template"
        ) from None
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            **{k: v for k, v in (specials or {}).items() if v is not None},
        )
    except jinja2.TemplateError as e:
        raise ValueError(f"the chat template failed: {e}") from e


def _raise(message: str):
    raise ValueError(f"the chat template refused the conversation: {message}")


def _render_chatml(template: str, messages, add_generation_prompt: bool) -> str:
    parts = []
    default = _CHATML_SYSTEM.search(template)
    if default and (not messages or messages[0]["role"] != "system"):
        if messages:  # SmolLM2 inserts it inside the message loop: not for an empty conversation
            system = re.sub(
                r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), default.group(1)
            )
            parts.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)
