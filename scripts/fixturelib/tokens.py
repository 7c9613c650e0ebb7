"""The fixtures' tokenizers: a tiny byte-level BPE per family with its special tokens, BOS
rule, chat template (in the family's real format) and stop tokens."""

from __future__ import annotations

import dataclasses
import json

import tokenizers
from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors

NUM_MERGES = 48
TEXT = "The quick brown fox jumps over the lazy dog in 1999. It's 12 o'clock, isn't it?"
MESSAGES = [
    {"role": "user", "content": "Hello! What is speculative decoding?"},
    {"role": "assistant", "content": "A small model drafts tokens and the large one checks them."},
    {"role": "user", "content": "Show me an example."},
]
# The merges are learned from this text (enough repeated words that they are whole tokens).
CORPUS = """\
The speculative decoder drafts a few tokens with a small model, then the target model checks
them all in one forward pass. When the draft is right, the target accepts the tokens and the
decoder moves on; when it is wrong, the target resamples the first rejected token. The output
follows the target's distribution, and the decoder is faster when the drafts are often right.
She sells sea shells by the sea shore; the shells she sells are sea shells, I'm sure. In 1999
there were 365 days, 52 weeks and 12 months, and the model counted them all again in 2024.
"""
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")  # Qwen splits digits one by one

# Chat templates in each family's real format: Llama 3.0's, Qwen2.5's and Qwen3's without tools
# (Qwen3's reasoning handling reduced to stripping <think> from earlier replies), Gemma 2's for
# both Gemmas (Gemma 3's renders user/model turns the same), Mistral-7B-Instruct-v0.2's.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
QWEN2_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\n') %}"
    "{%- else %}{%- set content = message.content %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)


@dataclasses.dataclass(frozen=True)
class Tok:
    """A family's tokenizer: special tokens (before the bytes when ``front``, as Gemma and
    Mistral number them, else after the merges), their roles and the chat template."""

    specials: tuple[str, ...]
    front: bool
    split: str | None  # a Llama-3/Qwen pre-tokenizer regex; None: GPT-2's ByteLevel regex
    bos: str | None
    eos: str
    pad: str | None
    unk: str | None
    add_bos: bool
    template: str
    stops: tuple[str, ...]  # generation_config's eos_token_id (a list when more than one)
    tokenizer_class: str
    plain: tuple[str, ...] = ()  # added tokens that are not special (Qwen3's <think>)


LLAMA_SPECIALS = (  # at Llama 3's offsets from 128000
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
)
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>")
GEMMA_TOK = Tok(
    specials=GEMMA_SPECIALS,
    front=True,
    split=None,
    bos="<bos>",
    eos="<eos>",
    pad="<pad>",
    unk="<unk>",
    add_bos=True,
    template=GEMMA_TEMPLATE,
    stops=("<eos>", "<end_of_turn>"),
    # Not GemmaTokenizer: transformers 5 would rebuild it SentencePiece-style (Metaspace)
    tokenizer_class="PreTrainedTokenizerFast",
)
QWEN_TOK = Tok(
    specials=QWEN_SPECIALS,
    front=False,
    split=QWEN_SPLIT,
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    unk=None,
    add_bos=False,
    template=QWEN2_TEMPLATE,
    stops=("<|im_end|>", "<|endoftext|>"),
    tokenizer_class="Qwen2Tokenizer",
)


def byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table, in byte order."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def pre_tokenizer(split: str | None):
    if split is None:
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def learn_merges() -> list[tuple[str, str]]:
    """NUM_MERGES byte-level BPE merges of CORPUS (Llama 3's pre-tokenizer)."""
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = pre_tokenizer(LLAMA3_SPLIT)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=256 + NUM_MERGES,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    merges = [tuple(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    assert len(merges) == NUM_MERGES, len(merges)
    return merges


def build_tokenizer(t: Tok, merges) -> tokenizers.Tokenizer:
    """Bytes in byte order, then the merges in order; specials before or after them."""
    body = byte_chars() + [a + b for a, b in merges]
    tokens = [*t.specials, *body, *t.plain] if t.front else [*body, *t.specials, *t.plain]
    vocab = {s: i for i, s in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    # Llama 3 tokenizers skip the merges of a word that is already one token (ignore_merges)
    tok = tokenizers.Tokenizer(
        tokenizers.models.BPE(vocab=vocab, merges=merges, ignore_merges=t.split == LLAMA3_SPLIT)
    )
    if t.split == QWEN_SPLIT:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizer(t.split)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in t.specials])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in t.plain])
    byte_level = processors.ByteLevel(trim_offsets=False)
    if t.add_bos:
        bos = processors.TemplateProcessing(
            single=f"{t.bos}:0 $A:0",
            pair=f"{t.bos}:0 $A:0 {t.bos}:1 $B:1",
            special_tokens=[(t.bos, vocab[t.bos])],
        )
        tok.post_processor = processors.Sequence([byte_level, bos])
    else:
        tok.post_processor = byte_level
    return tok


def tokenizer_config(t: Tok, tok: tokenizers.Tokenizer) -> dict:
    """tokenizer_config.json in the style of the family's hub files."""
    added = {}
    for s in [*t.specials, *t.plain]:
        added[str(tok.token_to_id(s))] = {
            "content": s,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": s in t.specials,
        }
    cfg = {"added_tokens_decoder": dict(sorted(added.items(), key=lambda kv: int(kv[0])))}
    if t.add_bos and t.front:  # Gemma's and Mistral's files say so; Llama 3's does not
        cfg |= {"add_bos_token": True, "add_eos_token": False}
    cfg |= {
        "bos_token": t.bos,
        "chat_template": t.template,
        "clean_up_tokenization_spaces": False,
        "eos_token": t.eos,
        "model_max_length": 256,
        "pad_token": t.pad,
        "tokenizer_class": t.tokenizer_class,
        "unk_token": t.unk,
    }
    return cfg
