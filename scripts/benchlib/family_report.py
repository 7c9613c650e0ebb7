"""The report of ``scripts/bench_families.py``: one row per family (speeds of transformers and
specjax, drafting statistics, the parity checks) and the methodology paragraph."""

from __future__ import annotations

import benchlib


def same_ids(r: dict, rows) -> str:
    """``yes`` when every configuration generated transformers' greedy ids (each is exact),
    else which did not and where it first differs."""
    ref = r["hf_ar"]["ids"]
    diff = [name for name in rows if r[name]["ids"] != ref]
    if not diff:
        return "yes"
    first = lambda a: next((i for i, (x, y) in enumerate(zip(a, ref, strict=True)) if x != y))
    return "**NO**: " + ", ".join(f"{name} at {first(r[name]['ids'])}" for name in diff)


HEAD = [
    "family", "exercises", "HF AR tok/s", "HF prompt lookup tok/s (tok/call)", "specjax AR tok/s",
    "specjax n-gram tok/s (accept., tok/step)", "specjax self-draft tok/s (accept., tok/step)",
    "specjax AR / HF AR", "specjax compile s (AR, n-gram, self)", "logits rel. err", "same ids",
    "distinct ids",
]  # fmt: skip


def row(family: str, r: dict, n: int, rows, rtol: float) -> list[str]:
    """The table row of one family's results ``r``."""
    tps = {name: n / r[name]["seconds"] for name in rows}
    spec = lambda name: f"{tps[name]:.2f} ({r[name]['accept']:.2f}, {r[name]['per_call']:.2f})"
    err = r["info"]["err"]
    return [
        family, r["info"]["exercises"], f"{tps['hf_ar']:.2f}",
        f"{tps['hf_pl']:.2f} ({r['hf_pl']['per_call']:.2f})", f"{tps['sj_ar']:.2f}",
        spec("sj_ngram"), spec("sj_self"), f"{tps['sj_ar'] / tps['hf_ar']:.2f}",
        ", ".join(f"{r[k]['compile_s']:.0f}" for k in ("sj_ar", "sj_ngram", "sj_self")),
        f"{err:.1e}" + (" **MISMATCH**" if err > rtol else ""), same_ids(r, rows),
        f"{len(set(r['hf_ar']['ids']))} of {n}",
    ]  # fmt: skip


def table(results: dict[str, dict], n: int, rows, rtol: float) -> str:
    """One row per family: speeds, drafting statistics and the parity checks."""
    body = [row(f, r, n, rows, rtol) for f, r in results.items()]
    return benchlib.markdown(HEAD, body, left=2)


REPORT = """{header}

{table}

One random model per family, all of one shape: hidden {hidden}, {layers} layers, {heads} query / \
{kv_heads} KV heads of {head_dim}, MLP {ffn}, tied embeddings, vocabulary {vocab} (Qwen2.5-0.5B \
has 151936: cut so that the time is spent in the layers, not the output head), {params} \
parameters; each with its family's switches ("exercises"). transformers made it (its random \
init, seed 0; norm weights and biases + N(0, 0.1²) so that every switch moves the logits) and \
saved it as fp32 safetensors; specjax loaded that directory (`load_pretrained`). logits rel. \
err: max |specjax − transformers| / max |transformers| over the prompt's logits (must be ≤ \
{rtol:g}). Prompt: the same {prompt_tokens} ids for both systems, a fixed pseudo-random text \
(words of 1-3 ids from a 1000-word lexicon with Zipf frequencies, seed 0; a random model has no \
tokenizer). Batch 1, fp32, greedy, exactly {n} new tokens (no stop token: `eos_token_id=None`, \
no `stop_tokens`); sliding windows W={window} < prompt + new tokens, so they cut in. tok/s = {n} \
/ median of {repeats} interleaved rounds (the five configurations called in turn each round, so \
that other load hits them alike) after one warm-up each; prefill included; specjax's compile \
time excluded and shown apart (the warm-up's). HF prompt lookup: `prompt_lookup_num_tokens={l}` \
(`max_matching_ngram_size` 2, the first match); tok/call: tokens per target forward after the \
prefill. specjax n-gram: `NgramDrafter` (L={l}, max_ngram 3, min_ngram 1, the most recent match, \
so a loop shorter than L yields shorter drafts) + `greedy`; self-draft: \
`ModelDrafter(truncated(model, {self_layers}))`, L={l}, + `greedy`; accept.: accepted / \
proposed draft tokens; tok/step: tokens per target step (block efficiency). A random model's \
greedy output is often degenerate (a token or a short loop repeated, which drafters then \
predict): "distinct ids" counts the distinct ids among the {n} generated; "same ids": whether \
every configuration generated transformers' greedy ids. transformers: {threads} torch threads, \
attention {attn}; JAX: its CPU client on all cores. Other load on the cores slows torch's \
threads far more than JAX's (a descheduled thread stalls every parallel op), so only a run whose \
load averages stay near 0 compares the two.
"""
