"""Chat templates: ChatML rendered natively, other templates through jinja2 (which must agree)."""

from __future__ import annotations

import pytest

from specjax.models.tokenizer import ByteTokenizer
from tests.loader_fixtures import CHATML


def test_chat_templates():
    tok = ByteTokenizer(chat_template=CHATML)
    convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    assert tok.apply_chat_template(convo, add_generation_prompt=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
    )
    with pytest.raises(ValueError, match="'role' and 'content'"):
        tok.apply_chat_template([{"content": "no role"}])
    other = ByteTokenizer(chat_template="{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    try:
        import jinja2.sandbox
    except ImportError:
        with pytest.raises(ValueError, match="pip install jinja2"):
            other.apply_chat_template(convo)
    else:
        assert other.apply_chat_template(convo) == "[S][Q]"
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        for c in (convo, convo[1:], []):
            for gen in (True, False):
                want = env.from_string(CHATML).render(messages=c, add_generation_prompt=gen)
                assert tok.apply_chat_template(c, gen) == want
