r"""SmolLM2-135M-Instruct with the feature draft head specjax trained for it
(checkpoints/smollm2_eagle: an EAGLE-3 class head reading blocks 1, 14 and 26, one decoder
layer, an 8k-id draft vocabulary), L = 3, widths=auto.

Command:  python -m specjax.decode --config configs/smollm2_eagle.py
Variants: --config.temperature=1 (block verification against the head's exact law);
          --config.top_paths=True --config.num_paths=3 --config.verifier=specinfer (T = 0: a tree
          of the head's three likeliest first tokens; it pays on a GPU, not on the 2-core CPU).
Results:  BENCHMARKS.md "A learned draft for SmolLM2" (held-out chat prompts, on the CPU and on
          an H200). One-shot runs of the default prompt (a short answer) are noisy.
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "smollm2")
    c.drafter = "eagle"
    c.draft = "checkpoints/smollm2_eagle"
    c.verifier = "block"
    c.num_speculative_tokens = 3  # L (scripts/bench_eagle.py)
    c.temperature = 0.0
    c.chat = True
    c.prompt = "Explain in three sentences why the sky is blue."
    c.max_new_tokens = 128
    return c
