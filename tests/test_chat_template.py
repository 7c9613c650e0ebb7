"""Chat templates: ChatML rendered natively, other templates through jinja2 (which must agree),
and one clear error for a non-ChatML template without jinja2."""

from __future__ import annotations

import sys

import jinja2.sandbox
import pytest

from specjax.models.tokenizer import ByteTokenizer
from tests.loader_fixtures import CHATML


def test_chat_templates(monkeypatch):
    tok = ByteTokenizer(chat_template=CHATML)
    convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    assert tok.apply_chat_template(convo, add_generation_prompt=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
    )
    with pytest.raises(ValueError, match="'role' and 'content'"):
        tok.apply_chat_template([{"content": "no role"}])
    other = ByteTokenizer(chat_template="{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert other.apply_chat_template(convo) == "[S][Q]"
    # ChatML rendered natively equals jinja2's rendering of the template (jinja2: dev extra).
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    for c in (convo, convo[1:], []):
        for gen in (True, False):
            want = env.from_string(CHATML).render(messages=c, add_generation_prompt=gen)
            assert tok.apply_chat_template(c, gen) == want
    # Without jinja2 a non-ChatML template is one clear error.
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "jinja2", None)
        m.setitem(sys.modules, "jinja2.sandbox", None)
        with pytest.raises(ValueError, match="pip install jinja2"):
            other.apply_chat_template(convo)
