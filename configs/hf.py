r"""Any model users download: a Hugging Face directory (``config.json``, ``*.safetensors``,
``tokenizer.json``) or a ``.gguf`` file of Llama 3.x, Mistral, Qwen2/2.5, Qwen3, Gemma 2 or
Gemma 3 (text) as the target; the n-gram (prompt-lookup) drafter by default.

Command:  python -m specjax.decode --config configs/hf.py --config.target=/path/to/Qwen3-1.7B
Drafters: --config.drafter=model --config.draft=/path/to/Qwen3-0.6B (same family and tokenizer);
          --config.drafter=self --config.draft_layers=8; --config.drafter=eagle --config.draft=DIR
          (specjax's or an EAGLE-3 layout). Base models: --config.chat=False.
Check:    --config.compare_autoregressive=True prints the speedup and, at temperature 0,
          whether the output equals autoregressive decoding token for token.
Stops at: the tokenizer's EOS and every eos_token_id of generation_config.json.
Results:  tiny random models of every family give transformers' logits and greedy tokens
          (docs/models.md); speed: BENCHMARKS.md "Model families".
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "shakespeare")
    c.target = ""  # required: a Hugging Face directory, a .gguf file or a specjax checkpoint
    c.drafter = "ngram"  # ngram | model (needs draft) | self | eagle (needs draft) | none
    c.draft = ""
    c.draft_layers = 8
    c.verifier = "block"
    c.num_speculative_tokens = 4
    c.temperature = 0.0
    c.chat = True
    c.prompt = "Write a short poem about the sea, then explain its rhyme scheme."
    c.max_new_tokens = 128
    return c
