r"""Benchmarks the Llama model on SmolLM2-135M-Instruct (GGUF), specjax next to transformers.

On this machine's CPU, batch 1, fp32, every number the median of ``--repeats`` timed calls after
``--warmup`` untimed ones (the first of which compiles):

* **load** -- ``load_pretrained`` of the GGUF (read, dequantize, build the model) and of an orbax
  checkpoint that ``specjax.models.checkpoint`` wrote once into a temporary directory; next to
  transformers loading the same GGUF (``from_pretrained(dir, gguf_file=...)``).
* **prefill** -- prompts of ``--prompt_lens`` tokens into an empty KV cache of capacity
  ``--capacity``; tokens/s. Both return the last position's logits only, which is what decoding
  needs; both compute the output head on that row only (``logits_to_keep=1``).
* **decode step** -- one new token on top of a prefilled context (the cache is donated to the
  jitted step and rolled back after each call, so every call sees the same context);
  transformers: the per-token time of ``model.generate`` itself (greedy, 33 new tokens minus 1
  new token, over 32), i.e. what users of ``generate`` pay per token, loop included.
* **tree scoring** -- a draft tree of K paths x L tokens (path-major, T = K * L, positions
  ``context + depth``, ancestor mask) scored in one call with tree attention, all T logits
  returned; its time divided by one decode step's is the verification cost factor that bounds
  speculative speedup: speedup = (E[tau] + 1) * t_step / (t_tree + t_draft).

transformers runs in the same process under ``torch.inference_mode()`` with
``torch.set_num_threads(--threads)``; without torch/transformers (the ``peer`` extra) its columns
are skipped with a note. The results in BENCHMARKS.md were produced with:

  python scripts/bench_model.py --output=/tmp/bench_model.md
"""

from __future__ import annotations

import datetime
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from flax import nnx

from specjax import tree
from specjax.models.cache import KVCache
from specjax.models.fetch import fetch_smollm2
from specjax.models.pretrained import load_pretrained
from specjax.models.pure import PureModel

_GGUF = flags.DEFINE_string("gguf", None, "GGUF file (default: fetch_smollm2()).")
_PROMPT_LENS = flags.DEFINE_list("prompt_lens", ["128", "512"], "Prompt lengths (tokens).")
_CAPACITY = flags.DEFINE_integer("capacity", 1024, "KV-cache capacity (slots) of specjax.")
_TREE_K = flags.DEFINE_list("tree_k", ["1", "2", "4"], "Draft-tree paths K.")
_TREE_L = flags.DEFINE_list("tree_l", ["4", "8"], "Draft-tree depths L.")
_TREE_CONTEXT = flags.DEFINE_integer("tree_context", 128, "Committed context under the tree.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per measurement (median).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed calls first (the first one compiles).")
_LOAD_REPEATS = flags.DEFINE_integer("load_repeats", 3, "Timed loads per format (median).")
_THREADS = flags.DEFINE_integer("threads", 2, "torch.set_num_threads for transformers.")
_PEER = flags.DEFINE_bool("peer", True, "Also time transformers (needs the peer extra).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown tables to this file.")

GEN_TOKENS = 32  # tokens over which transformers' generate per-token time is measured

TEXT = (
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg combined movable metal type, oil-based ink and a wooden screw press. Books "
    "became cheaper, literacy spread, and ideas travelled faster than ever before. "
)


def tree_inputs(context: int, k: int, l: int, vocab: int, seed: int = 0):
    """Path-major K x L tree (``specjax.tree``'s nodes without the root): tokens [1, T],
    positions [1, T], ancestor mask [1, T, T]."""
    depth = tree.tree_depths(k, l)[1:] - 1  # node (k, i) at depth i
    mask = tree.tree_mask(k, l)[1:, 1:]
    tokens = np.random.default_rng(seed).integers(0, vocab, (1, k * l))
    return (
        jnp.asarray(tokens, jnp.int32),
        jnp.asarray(context + depth[None, :], jnp.int32),
        jnp.asarray(mask[None]),
    )


# ---------------------------------------------------------------------------- specjax


class SpecjaxRunner:
    """Jitted specjax calls on one model; the cache is donated and rolled back between calls."""

    def __init__(self, pre, capacity: int):
        self.config = pre.config
        self.capacity = capacity
        self.target = PureModel.of(pre.model)
        self.cache = KVCache.init(self.config, 1, capacity)

    def _call(self, last_only: bool, context: int, tokens, positions=None, mask=None):
        if positions is None:  # a causal chain after the context (built outside the timing)
            b, t = tokens.shape
            positions, mask = self._causal(context, b, t)
        lengths = self._lengths(context)
        logits, self.cache = benchlib.forward_after(
            self.target, self.cache, lengths, tokens, positions, mask, last_only=last_only
        )
        jax.block_until_ready((logits, self.cache))
        return logits

    @functools.cache  # noqa: B019 (a few entries, for the runner's lifetime)
    def _lengths(self, context: int):
        return jnp.full((1,), context, jnp.int32)

    @functools.cache  # noqa: B019
    def _causal(self, context: int, b: int, t: int):
        positions = context + jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        return positions, jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))

    def prefill(self, tokens):
        """Last-position logits of ``tokens [1, T]`` written into an empty cache."""
        return self._call(True, 0, tokens)

    def decode(self, context: int, token):
        """Last-position logits of one token after ``context`` committed entries."""
        return self._call(True, context, token)

    def tree(self, context: int, tokens, positions, mask):
        """All logits of a draft tree after ``context`` committed entries."""
        return self._call(False, context, tokens, positions, mask)


def bench_specjax(gguf: Path, prompt: np.ndarray, rows: dict) -> None:
    timed = functools.partial(benchlib.median_time, repeats=_REPEATS.value, warmup=_WARMUP.value)
    load = lambda: jax.block_until_ready(nnx.state(load_pretrained(gguf).model))
    benchlib.log("specjax: loading the GGUF")
    rows["load"]["gguf"]["specjax"] = benchlib.median_time(load, _LOAD_REPEATS.value, 1)[0]
    pre = load_pretrained(gguf)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = pre.save(Path(tmp) / "smollm2-ckpt")
        load = lambda: jax.block_until_ready(nnx.state(load_pretrained(ckpt).model))
        benchlib.log("specjax: restoring the orbax checkpoint")
        rows["load"]["orbax"]["specjax"] = benchlib.median_time(load, _LOAD_REPEATS.value, 1)[0]

    run = SpecjaxRunner(pre, _CAPACITY.value)
    for n in map(int, _PROMPT_LENS.value):
        tokens = jnp.asarray(prompt[None, :n], jnp.int32)
        benchlib.log(f"specjax: prefill {n}")
        t, first = timed(lambda tokens=tokens: run.prefill(tokens))
        rows["prefill"][n]["specjax"] = (n / t, first)
        token = jnp.asarray(prompt[None, n : n + 1], jnp.int32)
        benchlib.log(f"specjax: decode step at context {n}")
        t, first = timed(lambda n=n, token=token: run.decode(n, token))
        rows["decode"][n]["specjax"] = (t, first)

    ctx = _TREE_CONTEXT.value
    if "specjax" not in rows["decode"][ctx]:
        token = jnp.asarray(prompt[None, ctx : ctx + 1], jnp.int32)
        rows["decode"][ctx]["specjax"] = timed(lambda: run.decode(ctx, token))
    step = rows["decode"][ctx]["specjax"][0]
    for k in map(int, _TREE_K.value):
        for l in map(int, _TREE_L.value):
            inputs = tree_inputs(ctx, k, l, pre.config.vocab_size)
            benchlib.log(f"specjax: tree K={k} L={l}")
            t, first = timed(lambda inputs=inputs: run.tree(ctx, *inputs))
            rows["tree"][(k, l)] = (t, t / step, first)


# ---------------------------------------------------------------------------- transformers


def bench_transformers(gguf: Path, prompt: np.ndarray, rows: dict) -> str | None:
    """Fills the transformers columns; returns a note when they are skipped."""
    if not _PEER.value:
        return "transformers columns skipped (--nopeer)."
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers
    except ImportError as e:
        return (
            f"transformers columns skipped: {e.name} is not installed (pip install -e '.[peer]')."
        )
    torch.set_num_threads(_THREADS.value)
    timed = functools.partial(benchlib.median_time, repeats=_REPEATS.value, warmup=_WARMUP.value)

    def load():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
        )
        return model.eval()

    benchlib.log("transformers: loading the GGUF")
    rows["load"]["gguf"]["transformers"] = benchlib.median_time(load, _LOAD_REPEATS.value, 1)[0]
    model = load()
    with torch.inference_mode():
        for n in map(int, _PROMPT_LENS.value):
            ids = torch.tensor(prompt[None, :n], dtype=torch.long)
            prefill = lambda ids=ids: model(ids, use_cache=True, logits_to_keep=1)
            benchlib.log(f"transformers: prefill {n}")
            t, first = timed(prefill)
            rows["prefill"][n]["transformers"] = (n / t, first)

            # Per-token time of ``generate`` itself (what users run): 1 + GEN_TOKENS tokens
            # minus 1 token (the prefill and first token), over GEN_TOKENS.
            def generate(count, ids=ids):
                return model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=count,
                    do_sample=False,
                    eos_token_id=None,
                    pad_token_id=0,
                )

            benchlib.log(f"transformers: generate per token at context {n}")
            long, first = timed(lambda: generate(1 + GEN_TOKENS))
            short, _ = timed(lambda: generate(1))
            t = (long - short) / GEN_TOKENS
            rows["decode"][n]["transformers"] = (t, first)
    return None


# ---------------------------------------------------------------------------- tables


def tables(rows: dict, header: str, note: str | None) -> str:
    fmt = benchlib.fmt
    out = [header, ""]
    if note:
        out += [f"*{note}*", ""]
    body = []
    for key, name in (("gguf", "GGUF file"), ("orbax", "orbax checkpoint (specjax)")):
        r = rows["load"][key]
        body.append([name, fmt(r.get("specjax"), ".2f"), fmt(r.get("transformers"), ".2f")])
    out += [
        f"**Load** (seconds, median of {_LOAD_REPEATS.value} after 1 warm-up; GGUF: read + "
        "dequantize Q4_1 to fp32 + build the model)",
        "",
        benchlib.table(["source", "specjax", "transformers"], body, left=1),
        "",
    ]
    body = []
    for n, r in rows["prefill"].items():
        ours, peer = r.get("specjax", (None, None)), r.get("transformers", (None, None))
        ratio = ours[0] / peer[0] if ours[0] and peer[0] else None
        body.append([n, fmt(ours[0], ".0f"), fmt(peer[0], ".0f"), fmt(ratio, ".2f")])
        body[-1].append(fmt(ours[1], ".1f"))
    head = ["prompt tokens", "specjax tok/s", "transformers tok/s", "specjax / transformers"]
    head.append("specjax first call (compile) s")
    out += [
        f"**Prefill** (batch 1, last-position logits; specjax cache capacity {_CAPACITY.value})",
        "",
        benchlib.table(head, body, left=0),
        "",
    ]
    body = []
    for n, r in rows["decode"].items():
        ours, peer = r.get("specjax", (None, None))[0], r.get("transformers", (None, None))[0]
        ratio = peer / ours if ours and peer else None
        body.append([n, fmt(ours and ours * 1e3, ".1f"), fmt(peer and peer * 1e3, ".1f")])
        body[-1].append(fmt(ratio, ".2f"))
    head = ["context tokens", "specjax ms", "transformers generate, ms per token"]
    head.append("transformers / specjax")
    out += [
        "**Decode step** (batch 1, one token, ms; specjax: jitted, cache donated, attention over "
        f"all {_CAPACITY.value} slots with a mask)",
        "",
        benchlib.table(head, body, left=0),
        "",
    ]
    step = rows["decode"][_TREE_CONTEXT.value]["specjax"][0]
    body = [
        [k, l, k * l, f"{t * 1e3:.1f}", f"{ratio:.2f}"]
        for (k, l), (t, ratio, _) in rows["tree"].items()
    ]
    out += [
        f"**Tree scoring** (specjax, one call, K paths x L tokens over a "
        f"{_TREE_CONTEXT.value}-token context, all T logits; one decode step = "
        f"{step * 1e3:.1f} ms)",
        "",
        benchlib.table(["K", "L", "T = K*L", "tree ms", "tree / decode step"], body, left=0),
    ]
    return "\n".join(out) + "\n"


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every save and restore at INFO
    gguf = Path(_GGUF.value) if _GGUF.value else fetch_smollm2()
    pre = load_pretrained(gguf)
    need = max(*map(int, _PROMPT_LENS.value), _TREE_CONTEXT.value) + 1
    text = TEXT * (need // 20 + 1)
    prompt = np.asarray(pre.tokenizer.encode(text, add_special_tokens=False)[:need], np.int64)
    assert prompt.size == need, "prompt text too short"
    del pre
    nested = lambda: {n: {} for n in map(int, _PROMPT_LENS.value)}
    rows = {
        "load": {"gguf": {}, "orbax": {}},
        "prefill": nested(),
        "decode": nested(),
        "tree": {},
    }
    rows["decode"].setdefault(_TREE_CONTEXT.value, {})
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    bench_specjax(gguf, prompt, rows)
    note = bench_transformers(gguf, prompt, rows)
    versions = f"jax {jax.__version__} ({jax.devices()[0].platform})"
    if "torch" in sys.modules:
        versions += f", torch {sys.modules['torch'].__version__}"
        versions += f", transformers {sys.modules['transformers'].__version__}"
    header = (
        f"SmolLM2-135M-Instruct ({gguf.name}, dequantized to fp32), batch 1. "
        f"Machine: {benchlib.cpu_name()}; {versions}; {datetime.date.today()}; "
        f"median of {_REPEATS.value} calls after {_WARMUP.value} warm-up; "
        f"total {time.perf_counter() - t0:.0f} s; 1-min load average before the run "
        f"{load_before:.1f} (near 0 when no other process competes for the cores)."
    )
    benchlib.write_report(tables(rows, header, note), _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
