"""The six fixture families: their sizes, both config styles (transformers 5's and the hub's)
and the features whose removal must move the logits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fixturelib.tokens import (
    GEMMA_TOK,
    LLAMA3_SPLIT,
    LLAMA3_TEMPLATE,
    LLAMA_SPECIALS,
    MISTRAL_TEMPLATE,
    QWEN3_TEMPLATE,
    QWEN_TOK,
    Tok,
)


@dataclasses.dataclass(frozen=True)
class Family:
    """One fixture: sizes shared by both config styles, the keys only transformers 5 writes,
    the keys only hub files carry, and the features whose loss must move the logits."""

    name: str
    tok: Tok
    sizes: dict
    config: Callable[[dict], dict]  # token ids -> transformers 5 keys
    hub: Callable[[dict], dict]  # token ids -> hub-only keys
    # feature -> (config changes that remove it, parameter names containing this are reset
    # to transformers' init: norms 1 (Gemma 0), biases 0)
    features: dict[str, tuple[dict, str | None]]
    emb_std: float = 0.5  # embedding / lm_head scale (sets the logits' size)
    gain: float = 1.0  # projections are N(0, gain^2 / fan_in)
    norm_std: float = 0.25  # norm weights are their init value + N(0, norm_std^2)

    def v5_config(self, ids: dict) -> dict:
        return {**self.sizes, **self.config(ids)}

    def hub_config(self, ids: dict) -> dict:
        """The hub's style: keys sorted, as transformers 4 wrote them."""
        common = {"initializer_range": 0.02, "torch_dtype": "float32", "use_cache": True}
        return dict(sorted({**self.sizes, **common, **self.hub(ids)}.items()))


def sizes(vocab, hidden, inter, layers, heads, kv, **kw) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=256,
        **kw,
    )


LLAMA3_ROPE = {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    # wavelengths over 64 are scaled, under 16 kept, between smoothed: all three at head_dim 12
    "original_max_position_embeddings": 64,
    "rope_type": "llama3",
}
GEMMA2_CAPS = {"attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}
GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
}
NO_WINDOW = {"sliding_window": 4096}  # every layer keeps its type; the window covers all
NORMS_AT_INIT = ({}, "norm")


def _rope(theta: float) -> dict:
    return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}


def token_ids(ids: dict, *tokens: str) -> int | list[int]:
    return ids[tokens[0]] if len(tokens) == 1 else [ids[t] for t in tokens]


FAMILIES = {
    f.name: f
    for f in [
        Family(  # meta-llama/Llama-3.2-1B-Instruct's keys, untied like Llama-3.1-8B
            "llama",
            Tok(
                specials=LLAMA_SPECIALS,
                front=False,
                split=LLAMA3_SPLIT,
                bos="<|begin_of_text|>",
                eos="<|eot_id|>",
                pad=None,
                unk=None,
                add_bos=True,
                template=LLAMA3_TEMPLATE,
                stops=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
                tokenizer_class="PreTrainedTokenizerFast",
            ),
            sizes(320, 48, 128, 2, 4, 2, head_dim=12, rms_norm_eps=1e-5, tie_word_embeddings=False),
            lambda ids: {
                "rope_parameters": {**LLAMA3_ROPE, "rope_theta": 500000.0},
                "bos_token_id": ids["<|begin_of_text|>"],
                "eos_token_id": token_ids(ids, "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
            },
            lambda ids: {
                "architectures": ["LlamaForCausalLM"],
                "attention_bias": False,
                "attention_dropout": 0.0,
                "bos_token_id": ids["<|begin_of_text|>"],
                "eos_token_id": token_ids(ids, "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
                "hidden_act": "silu",
                "mlp_bias": False,
                "model_type": "llama",
                "pretraining_tp": 1,
                "rope_scaling": LLAMA3_ROPE,
                "rope_theta": 500000.0,
                "transformers_version": "4.45.0.dev0",
            },
            {
                "rope_without_llama3_scaling": (_rope(500000.0), None),
                "norms_at_init": NORMS_AT_INIT,
            },
        ),
        Family(  # Qwen/Qwen2.5-0.5B-Instruct's keys, with its sliding window switched on
            "qwen2",
            QWEN_TOK,
            sizes(320, 32, 64, 4, 4, 2, rms_norm_eps=1e-6, tie_word_embeddings=True),
            lambda ids: {
                **_rope(1000000.0),
                "use_sliding_window": True,
                "sliding_window": 8,
                "max_window_layers": 2,
                "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2,
                "bos_token_id": ids["<|endoftext|>"],
                "eos_token_id": ids["<|im_end|>"],
            },
            lambda ids: {
                "architectures": ["Qwen2ForCausalLM"],
                "attention_dropout": 0.0,
                "bos_token_id": ids["<|endoftext|>"],
                "eos_token_id": ids["<|im_end|>"],
                "hidden_act": "silu",
                "max_window_layers": 2,
                "model_type": "qwen2",
                "rope_theta": 1000000.0,
                "sliding_window": 8,
                "transformers_version": "4.43.1",
                "use_sliding_window": True,
            },
            {
                "no_sliding_window": (NO_WINDOW, None),
                "zero_qkv_biases": ({}, "bias"),
                "norms_at_init": NORMS_AT_INIT,
            },
        ),
        Family(  # Qwen/Qwen3-0.6B's keys, untied like Qwen3-8B
            "qwen3",
            dataclasses.replace(QWEN_TOK, template=QWEN3_TEMPLATE, plain=("<think>", "</think>")),
            sizes(320, 32, 64, 3, 4, 2, head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=False),
            lambda ids: {
                **_rope(1000000.0),
                "max_window_layers": 3,
                "bos_token_id": ids["<|endoftext|>"],
                "eos_token_id": ids["<|im_end|>"],
            },
            lambda ids: {
                "architectures": ["Qwen3ForCausalLM"],
                "attention_bias": False,
                "attention_dropout": 0.0,
                "bos_token_id": ids["<|endoftext|>"],
                "eos_token_id": ids["<|im_end|>"],
                "hidden_act": "silu",
                "max_window_layers": 3,
                "model_type": "qwen3",
                "rope_scaling": None,
                "rope_theta": 1000000,
                "sliding_window": None,
                "transformers_version": "4.51.0",
                "use_sliding_window": False,
            },
            {"qk_norms_at_init": ({}, "_norm"), "norms_at_init": NORMS_AT_INIT},
        ),
        Family(  # mistralai/Mistral-7B-v0.1's keys (no head_dim: hidden / heads)
            "mistral",
            Tok(
                specials=("<unk>", "<s>", "</s>"),
                front=True,
                split=None,
                bos="<s>",
                eos="</s>",
                pad=None,
                unk="<unk>",
                add_bos=True,
                template=MISTRAL_TEMPLATE,
                stops=("</s>",),
                tokenizer_class="PreTrainedTokenizerFast",  # LlamaTokenizer is Metaspace in 5
            ),
            sizes(320, 48, 96, 2, 4, 2, rms_norm_eps=1e-5, tie_word_embeddings=False),
            lambda ids: {
                **_rope(10000.0),
                "sliding_window": 8,
                "bos_token_id": ids["<s>"],
                "eos_token_id": ids["</s>"],
            },
            lambda ids: {
                "architectures": ["MistralForCausalLM"],
                "bos_token_id": ids["<s>"],
                "eos_token_id": ids["</s>"],
                "hidden_act": "silu",
                "model_type": "mistral",
                "rope_theta": 10000.0,
                "sliding_window": 8,
                "transformers_version": "4.34.0.dev0",
            },
            {"no_sliding_window": (NO_WINDOW, None), "norms_at_init": NORMS_AT_INIT},
        ),
        Family(  # google/gemma-2-2b-it's keys (tied: no tie_word_embeddings key)
            "gemma2",
            GEMMA_TOK,
            sizes(320, 32, 64, 4, 4, 2, head_dim=16, rms_norm_eps=1e-6, sliding_window=8),
            lambda ids: {
                **_rope(10000.0),
                **GEMMA2_CAPS,
                "query_pre_attn_scalar": 24,
                "layer_types": ["sliding_attention", "full_attention"] * 2,
                "pad_token_id": ids["<pad>"],
                "bos_token_id": ids["<bos>"],
                "eos_token_id": token_ids(ids, "<eos>", "<end_of_turn>"),
            },
            lambda ids: {
                **GEMMA2_CAPS,
                "architectures": ["Gemma2ForCausalLM"],
                "attention_bias": False,
                "attention_dropout": 0.0,
                "bos_token_id": ids["<bos>"],
                "cache_implementation": "hybrid",
                "eos_token_id": token_ids(ids, "<eos>", "<end_of_turn>"),
                "hidden_act": "gelu_pytorch_tanh",
                "hidden_activation": "gelu_pytorch_tanh",
                "model_type": "gemma2",
                "pad_token_id": ids["<pad>"],
                "query_pre_attn_scalar": 24,
                "rope_theta": 10000.0,
                "transformers_version": "4.42.4",
            },
            {
                "no_sliding_window": (NO_WINDOW, None),
                "no_attn_softcapping": ({"attn_logit_softcapping": None}, None),
                "no_final_softcapping": ({"final_logit_softcapping": None}, None),
                "query_pre_attn_scalar_is_head_dim": ({"query_pre_attn_scalar": 16}, None),
                "norms_at_init": NORMS_AT_INIT,
            },
            emb_std=0.15,  # tied and scaled by sqrt(hidden): larger ones repeat the last token
            gain=3.0,
            norm_std=0.6,
        ),
        Family(  # google/gemma-3-1b-it's keys, with gemma-3-4b's linear scaling
            "gemma3_text",
            GEMMA_TOK,
            sizes(320, 32, 64, 6, 4, 1, head_dim=16, rms_norm_eps=1e-6, sliding_window=8),
            lambda ids: {
                "rope_parameters": GEMMA3_ROPE,
                "query_pre_attn_scalar": 32,
                "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
                "pad_token_id": ids["<pad>"],
                "bos_token_id": ids["<bos>"],
                "eos_token_id": token_ids(ids, "<eos>", "<end_of_turn>"),
            },
            lambda ids: {
                "architectures": ["Gemma3ForCausalLM"],
                "attention_bias": False,
                "attention_dropout": 0.0,
                "attn_logit_softcapping": None,
                "bos_token_id": ids["<bos>"],
                "cache_implementation": "hybrid",
                "eos_token_id": token_ids(ids, "<eos>", "<end_of_turn>"),
                "final_logit_softcapping": None,
                "hidden_activation": "gelu_pytorch_tanh",
                "model_type": "gemma3_text",
                "pad_token_id": ids["<pad>"],
                "query_pre_attn_scalar": 32,
                "rope_local_base_freq": 10000,
                "rope_scaling": {"factor": 4.0, "rope_type": "linear"},
                "rope_theta": 1000000,
                "sliding_window_pattern": 6,
                "transformers_version": "4.50.0.dev0",
            },
            {
                "no_sliding_window": (NO_WINDOW, None),
                "global_rope_without_linear_scaling": (
                    {
                        "rope_parameters": {
                            **GEMMA3_ROPE,
                            "full_attention": _rope(1e6)["rope_parameters"],
                        }
                    },
                    None,
                ),
                "local_rope_base_is_global": (
                    {
                        "rope_parameters": {
                            **GEMMA3_ROPE,
                            "sliding_attention": _rope(1e6)["rope_parameters"],
                        }
                    },
                    None,
                ),
                "query_pre_attn_scalar_is_head_dim": ({"query_pre_attn_scalar": 16}, None),
                "qk_norms_at_init": ({}, "_norm"),
                "norms_at_init": NORMS_AT_INIT,
            },
            emb_std=0.15,
            norm_std=0.6,
        ),
    ]
}
