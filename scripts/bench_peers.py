r"""Benchmarks specjax next to what Hugging Face users run: ``transformers`` ``generate``.

One process, batch 1, fp32, greedy, exactly ``--new_tokens`` new tokens, the same prompt ids for
both systems, each row's two configurations run interleaved (``--repeats`` rounds after one
warm-up each, so load hits both; medians reported). SmolLM2-135M-Instruct (three chat prompts):
autoregressive decoding, and ``NgramDrafter`` + ``greedy`` vs ``prompt_lookup_num_tokens=L``. The
Shakespeare pair, exported to Hugging Face Llama directories (logits checked against specjax's):
autoregressive, and ``ModelDrafter`` + ``greedy`` vs assisted generation (``assistant_model``)
with transformers' defaults and with L fixed. No stop token (transformers: ``eos_token_id=None``;
``min_new_tokens`` alone would mask EOS and change the greedy sequence). Times include prefill;
specjax's compile time is shown apart. The floor: every SmolLM2 weight read once at the measured
bandwidth (``benchlib.bandwidth``). The report text below says the rest. Run from the repo root:

  python scripts/bench_peers.py --new_tokens=128 --repeats=3 --output=/tmp/bench_peers.md \
      --plot=/tmp/bench_peers.png
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.util
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub import

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from benchlib import plots
from benchlib.chat_prompts import CHATS

import specjax
from specjax.decode import DecodeConfig, generate
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.drafters.feature import FeatureDrafter
from specjax.models import fetch_smollm2, load_pretrained
from specjax.models.eagle_formats import load_head
from specjax.models.pure import PureModel
from specjax.models.safetensors_loader import save_safetensors
from specjax.sampling import SamplingParams

_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 128, "Tokens generated per generation.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed interleaved rounds per row (median).")
_NGRAM_LENS = flags.DEFINE_list("ngram_lens", ["2", "4", "6"], "Prompt-lookup draft lengths L.")
_TREE_PATHS = flags.DEFINE_integer("tree_paths", 3, "n-gram tree rows: K paths (0: none).")
_DRAFT_LENS = flags.DEFINE_list("draft_lens", ["4"], "Shakespeare draft-model lengths L.")
_HEAD = flags.DEFINE_string(
    "head", "checkpoints/smollm2_eagle", "SmolLM2's learned draft head ('' for no head rows)."
)
_HEAD_LENS = flags.DEFINE_list("head_lens", ["4"], "Draft lengths L of the learned head.")
_THREADS = flags.DEFINE_integer("threads", 2, "torch.set_num_threads for transformers.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown report to this file.")
_PLOT = flags.DEFINE_string("plot", None, "PNG of tokens/s per row (needs matplotlib).")
_QUICK = flags.DEFINE_bool("quick", False, "Smoke run (flags given explicitly still win).")

QUICK = {"new_tokens": 8, "repeats": 1, "ngram_lens": ["4"], "tree_paths": 0, "head_lens": ["2"]}

GREEDY = SamplingParams(temperature=0.0)
LOGIT_RTOL = 1e-4
SHAKESPEARE_PROMPTS = {
    "ROMEO": "ROMEO:\n",
    "First Citizen": "First Citizen:\nBefore we proceed any further, hear me speak.\n",
}


value = functools.partial(benchlib.quick_value, quick=QUICK)
"""A flag's value, or its ``--quick`` value unless given on the command line."""


@dataclasses.dataclass
class Row:
    """One specjax configuration (``target``, ``drafter``: None for autoregressive) and its
    transformers counterpart (``hf`` model, extra ``generate`` kwargs) on prompt ``ids``;
    :func:`measure` fills ``results``."""

    model: str
    prompt: str
    method: str
    ids: list[int]
    target: PureModel
    drafter: object
    hf: object
    hf_kwargs: dict = dataclasses.field(default_factory=dict)
    results: dict = dataclasses.field(default_factory=dict)

    @property
    def same(self) -> bool:
        """Whether both systems generated the same ids."""
        return self.results["ours_ids"] == self.results["hf_ids"]


def hf_run(torch, model, ids: list[int], n: int, **kwargs) -> Callable:
    """transformers' greedy ``generate`` of exactly ``n`` tokens (no EOS), timed."""
    x = torch.tensor([ids])
    kwargs.update(attention_mask=torch.ones_like(x), do_sample=False, eos_token_id=None)
    kwargs.update(max_new_tokens=n, min_new_tokens=n)

    def run():
        with torch.inference_mode():
            out, seconds = benchlib.timed(lambda: model.generate(x, **kwargs))
        new = out[0, len(ids) :].tolist()
        assert len(new) == n, f"transformers generated {len(new)} tokens, not {n}"
        return new, seconds

    return run


def count_forwards(modules, fn: Callable) -> list[int]:
    """Calls ``fn`` and returns how many forward calls each of ``modules`` made in it."""
    counts = [0] * len(modules)
    bump = lambda i: lambda *_: counts.__setitem__(i, counts[i] + 1)
    handles = [m.register_forward_hook(bump(i)) for i, m in enumerate(modules)]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return counts


def measure(torch, row: Row, n: int, repeats: int) -> None:
    """Warm-up (compile; count transformers' forwards), then interleaved timed rounds."""
    benchlib.log(f"{row.model} / {row.prompt} / {row.method}")
    verifier = "autoregressive" if row.drafter is None else "greedy"
    if row.drafter is not None and row.drafter.num_paths > 1:
        verifier = "specinfer"  # any multi-path verifier keeps the argmax at temperature 0
    config = DecodeConfig(verifier, GREEDY, max_new_tokens=n, stop_tokens=())
    ours = lambda: generate(row.target, [row.ids], config, row.drafter)
    peer = hf_run(torch, row.hf, row.ids, n, **row.hf_kwargs)
    first = ours()
    draft = row.hf_kwargs.get("assistant_model")
    calls = count_forwards([row.hf] + ([draft] if draft else []), peer)
    ours_s, peer_s = [], []
    for _ in range(repeats):
        gen = ours()
        ours_s.append(gen.metrics.seconds)
        hf_ids, seconds = peer()
        peer_s.append(seconds)
        benchlib.log(f"  specjax {ours_s[-1]:.2f} s, transformers {seconds:.2f} s")
    row.results = dict(
        ours_s=statistics.median(ours_s), hf_s=statistics.median(peer_s), ours_ids=gen.tokens[0],
        hf_ids=hf_ids, metrics=gen.metrics, compile_s=first.metrics.compile_seconds, hf_calls=calls,
        spread=f"{max(ours_s) / min(ours_s):.2f}, {max(peer_s) / min(peer_s):.2f}",
    )  # fmt: skip


def check_export(torch, pre, hf_model, ids: list[int]) -> float:
    """Relative max logit difference of the exported model; exits when above 1e-4."""
    with torch.inference_mode():
        ref = hf_model(torch.tensor([ids])).logits.float().numpy()
    ours = np.asarray(pre.model(jnp.asarray([ids], jnp.int32)).logits)
    err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    if err > LOGIT_RTOL:
        sys.exit(f"error: exported {pre.config.name} logits differ by {err:.3g} > {LOGIT_RTOL}")
    return err


def smollm2_rows(torch, transformers) -> tuple[list[Row], int]:
    """The SmolLM2 rows and the bytes of its weights."""
    path = fetch_smollm2()
    pre = load_pretrained(path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, local_files_only=True
    ).eval()
    target, tok, vocab = PureModel.of(pre.model), pre.tokenizer, pre.config.vocab_size
    head = load_head(_HEAD.value, pre.model) if _HEAD.value else None
    chats = {"copy": CHATS["copy"]} if _QUICK.value else CHATS
    rows = []
    for name, content in chats.items():
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": content}]))
        prompt = f"{name} ({len(ids)} tok)"
        row = functools.partial(Row, "SmolLM2", prompt, ids=ids, target=target, hf=hf)
        rows.append(row("autoregressive", drafter=None))
        for l in map(int, value("ngram_lens")):
            kwargs = dict(prompt_lookup_num_tokens=l)
            for k in sorted({1, value("tree_paths")} - {0}):  # K = 1: a chain; K > 1: a tree
                drafter = NgramDrafter(vocab, num_paths=k, draft_len=l, max_ngram=3, min_ngram=1)
                method = f"prompt lookup L={l}" + (f", tree K={k}" if k > 1 else "")
                rows.append(row(method, drafter=drafter, hf_kwargs=kwargs))
        if head is not None:  # transformers has no EAGLE head: its counterpart is plain generate
            for l in map(int, value("head_lens")):
                drafter = FeatureDrafter(head, num_paths=1, draft_len=l, sampling=GREEDY)
                rows.append(row(f"learned head L={l} (HF: generate)", drafter=drafter))
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(pre.params))
    return rows, weight_bytes


def shakespeare_rows(torch, transformers, tmp: pathlib.Path) -> tuple[list[Row], str]:
    """The Shakespeare rows (both models exported to HF Llama directories and checked)."""
    pre, hf, errs = {}, {}, []
    for name in ("target", "draft"):
        pre[name] = load_pretrained(f"checkpoints/shakespeare/{name}")
        out = save_safetensors(tmp / name, pre[name].params, pre[name].config)
        hf[name] = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        ids = pre[name].tokenizer.encode(SHAKESPEARE_PROMPTS["First Citizen"])
        errs.append(f"{name} {check_export(torch, pre[name], hf[name], ids):.1e}")
    fixed = {}  # per L, a draft copy whose generation config fixes the draft length
    for l in map(int, value("draft_lens")):
        fixed[l] = transformers.LlamaForCausalLM.from_pretrained(tmp / "draft", dtype=torch.float32)
        fixed[l].eval().generation_config.update(
            num_assistant_tokens=l,
            num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0,
        )
    target, draft = PureModel.of(pre["target"].model), PureModel.of(pre["draft"].model)
    prompts = dict(list(SHAKESPEARE_PROMPTS.items())[:1]) if _QUICK.value else SHAKESPEARE_PROMPTS
    rows = []
    for name, text in prompts.items():
        ids = pre["target"].tokenizer.encode(text)
        prompt = f"{name} ({len(ids)} B)"
        row = functools.partial(Row, "Shakespeare", prompt, ids=ids, target=target, hf=hf["target"])
        rows.append(row("autoregressive", drafter=None))
        for l in map(int, value("draft_lens")):
            drafter = ModelDrafter(draft, num_paths=1, draft_len=l, sampling=GREEDY)
            for what, assistant in (("default", hf["draft"]), (f"fixed L={l}", fixed[l])):
                method = f"draft model L={l} vs HF assisted {what}"
                kwargs = dict(assistant_model=assistant)
                rows.append(row(method, drafter=drafter, hf_kwargs=kwargs))
    return rows, ", ".join(errs)


# ---------------------------------------------------------------------------- report


def same_ids(row: Row, ar: dict) -> str:
    """``yes``, or where the two outputs first differ and which matches its own AR output."""
    r = row.results
    ours, peer = r["ours_ids"], r["hf_ids"]
    if ours == peer:
        return "yes"
    i = next((i for i, (a, b) in enumerate(zip(ours, peer, strict=False)) if a != b), len(ours))
    base = ar.get((row.model, row.prompt))
    note = ""
    if base is not None and row.method != "autoregressive":
        yn = lambda ids, key: "yes" if ids == base.results[key] else "no"
        note = f"; = own AR: specjax {yn(ours, 'ours_ids')}, HF {yn(peer, 'hf_ids')}"
    return f"**NO** (first diff at {i}{note})"


HEAD = "prompt|method|ids equal|specjax tok/s|HF tok/s|specjax / HF|max/min time (specjax, HF)"
HEAD += "|specjax block eff."
HEAD += "|specjax accept.|specjax tok/call|HF tok/call|HF draft calls|specjax compile s"


def table(rows: list[Row], n: int) -> str:
    """The results of ``rows``: speeds, their ratio, whether the ids agree, drafting stats."""
    ar = {(r.model, r.prompt): r for r in rows if r.method == "autoregressive"}
    body = []
    for row in rows:
        r, m, spec = row.results, row.results["metrics"], row.drafter is not None
        hf_target, *hf_draft = r["hf_calls"]
        fmt = benchlib.fmt
        body.append([
            row.prompt, row.method, same_ids(row, ar), f"{n / r['ours_s']:.1f}",
            f"{n / r['hf_s']:.1f}", f"{r['hf_s'] / r['ours_s']:.2f}", r["spread"],
            fmt(m.block_efficiency if spec else None, ".2f"),
            fmt(m.acceptance_rate if spec else None, ".2f"), f"{n / max(m.steps, 1):.2f}",
            f"{(n - 1) / max(hf_target - 1, 1):.2f}", fmt(hf_draft[0] if hf_draft else None, "d"),
            f"{r['compile_s']:.1f}",
        ])  # fmt: skip
    return benchlib.markdown(HEAD.split("|"), body, left=3)


def floor_table(rows: list[Row], n: int, bytes_per_s: float, weight_bytes: int) -> str:
    """Autoregressive ms/token of both systems as multiples of the weights-read time."""
    floor = weight_bytes / bytes_per_s
    body = []
    for row in rows:
        if row.model == "SmolLM2" and row.drafter is None:
            ours, peer = (row.results[k] / n for k in ("ours_s", "hf_s"))
            body.append([row.prompt, f"{ours * 1e3:.1f}", f"{ours / floor:.2f}"])
            body[-1] += [f"{peer * 1e3:.1f}", f"{peer / floor:.2f}"]
    head = ["prompt", "specjax AR ms/token", "× floor", "HF AR ms/token", "× floor"]
    return (
        f"Memory bandwidth (jitted jnp.sum over 540 MB fp32, median of 10): "
        f"{bytes_per_s / 1e9:.1f} GB/s; SmolLM2 weights {weight_bytes / 1e6:.0f} MB (fp32, tied "
        f"embedding once) -> weights-read floor {floor * 1e3:.1f} ms/token.\n\n"
        + benchlib.markdown(head, body, left=1)
    )


def plot(rows: list[Row], n: int, path: str) -> None:
    labels = [f"{r.model} / {r.prompt} / {r.method}" for r in rows]
    ours = [n / r.results["ours_s"] for r in rows]
    peer = [n / r.results["hf_s"] for r in rows]
    if plots.peer_speeds(labels, ours, peer, n, path) is None:
        benchlib.log("matplotlib is not installed; no plot")
    else:
        benchlib.log(f"wrote {path}")


SOURCE = pathlib.Path(specjax.__file__).parent
REPORT = """{header}

Batch 1, fp32, greedy, exactly {n} new tokens (no stop token); tok/s = {n} / median of {repeats} \
interleaved timed runs after one warm-up (prefill included; specjax compile time excluded, shown \
apart). specjax / HF: speed ratio. max/min time: the spread of each system's timed runs (other \
load shows there). tok/call: tokens per target forward after the prefill. HF draft calls: the \
draft model's forwards in the warm-up run. specjax compile s: 0 where an earlier row compiled the \
same shapes. specjax vs HF generated ids: {ids}

#### SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to fp32)

Prompt lookup: specjax NgramDrafter (max_ngram 3, min_ngram 1, most recent match), greedy \
verifier; "tree K": the K best distinct matches (longest, then most recent) verified as a tree \
(specinfer); HF prompt_lookup_num_tokens=L (max_matching_ngram_size 2, first match). "learned \
head": specjax's FeatureDrafter with the committed EAGLE-class head (checkpoints/smollm2_eagle), \
greedy verifier; transformers has no such head, so its column is plain generate.

{smol}

{floor}

#### Shakespeare pair (3.2M target, 0.43M draft, byte-level), exported to HF Llama

Exported logits vs specjax, max|diff|/max|ref|: {export}. HF assisted default: the assistant's \
defaults (num_assistant_tokens 20, schedule constant, assistant_confidence_threshold 0.4, \
{assisted}); HF assisted fixed L: num_assistant_tokens=L, schedule constant, threshold 0.

{shakes}
"""


def main(argv):
    del argv
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f'bench_peers needs {e.name}: pip install -e ".[peer]"')
    logging.set_verbosity(logging.WARNING)  # orbax logs every restore at INFO
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(_THREADS.value)
    n, repeats = value("new_tokens"), value("repeats")
    t0, load = time.perf_counter(), os.getloadavg()[0]
    bytes_per_s = benchlib.bandwidth()
    smol, weight_bytes = smollm2_rows(torch, transformers)
    with tempfile.TemporaryDirectory() as tmp:
        shakes, export_err = shakespeare_rows(torch, transformers, pathlib.Path(tmp))
        for row in smol + shakes:
            measure(torch, row, n, repeats)
    bad = [f"{r.model} / {r.prompt} / {r.method}" for r in smol + shakes if not r.same]
    for name in bad:
        benchlib.log(f"MISMATCH: specjax and transformers generated different ids: {name}")
    header = (
        f"`{benchlib.command()}` on "
        f"{benchlib.machine(verbose=True)}; {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} "
        f"UTC; specjax source {benchlib.source_digest(SOURCE, recursive=True)}; torch "
        f"{torch.__version__} ({_THREADS.value} threads), transformers {transformers.__version__}; "
        f"total {time.perf_counter() - t0:.0f} s; 1-min load average {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after (near 0 when nothing else competes for the cores)."
    )
    sklearn = importlib.util.find_spec("sklearn") is not None
    report = REPORT.format(
        header=header, n=n, repeats=repeats, smol=table(smol, n), shakes=table(shakes, n),
        floor=floor_table(smol, n, bytes_per_s, weight_bytes), export=export_err,
        assisted="tuned online (scikit-learn installed)" if sklearn else "fixed (no scikit-learn)",
        ids=f"**GENERATED IDS DIFFER** in: {'; '.join(bad)}." if bad else "identical in every row.",
    )  # fmt: skip
    benchlib.write_report(report, _OUTPUT.value)
    if _PLOT.value:
        plot(smol + shakes, n, _PLOT.value)


if __name__ == "__main__":
    app.run(main)
