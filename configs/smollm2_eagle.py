r"""SmolLM2-135M-Instruct with the feature draft head specjax trained for it
(checkpoints/smollm2_eagle: an EAGLE-3 class head reading blocks 1, 14 and 26, one decoder
layer, an 8k-id draft vocabulary), L = 3, widths=auto.

Command:  python -m specjax.decode --config configs/smollm2_eagle.py
Variants: --config.temperature=1 (block verification against the head's exact law);
          --config.top_paths=True --config.num_paths=3 --config.verifier=specinfer (T = 0: a tree
          of the head's three likeliest first tokens; it pays on a GPU, not on the 2-core CPU).
Hardware: the head trained on a lent H200; measured on the 2-core CPU and an H200, 2026-11-27/28.
Result:   on 23 held-out chat prompts, 1.26x autoregressive at the median on the CPU (0.97-1.84x),
          1.71x on an H200 (1.38-2.43x; the tree 1.86x): BENCHMARKS.md "A learned draft for
          SmolLM2". One-shot runs of the default prompt (a short answer) are noisy (+-10%).
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "smollm2")
    c.drafter = "eagle"
    c.draft = "checkpoints/smollm2_eagle"
    c.verifier = "block"
    c.num_speculative_tokens = 3  # bench_eagle.py: 1.26x median on the CPU (session 21)
    c.temperature = 0.0
    c.chat = True
    c.prompt = "Explain in three sentences why the sky is blue."
    c.max_new_tokens = 128
    return c
