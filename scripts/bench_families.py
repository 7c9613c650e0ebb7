r"""Benchmarks specjax next to transformers' ``generate`` on one ~0.5B shape of every family.

One random model per family (llama, mistral, qwen2, qwen3, gemma2, gemma3_text), all of
Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query / 2 KV heads of 64, MLP 4864, tied
embeddings) with a vocabulary cut to 32768 so that the CPU time goes to the layers, each with its
family's own switches (RoPE scaling, sliding windows shorter than prompt + generation, biases,
q/k norms, soft-caps, ...). transformers builds it (its random init, seed 0; norms and biases
moved off their init so every switch changes the logits) and saves it as fp32 safetensors;
specjax loads that directory, and the prompt logits of both must agree within 1e-4 relative.

Per family, five configurations timed in interleaved rounds (``--repeats`` after one warm-up
each; medians): transformers greedy ``generate``, transformers prompt lookup
(``prompt_lookup_num_tokens=L``), specjax autoregressive, specjax ``NgramDrafter`` + ``greedy``
(L) and specjax self-draft (the first ``--self_layers`` layers, ``ModelDrafter``) + ``greedy``.
Batch 1, fp32, exactly ``--new_tokens`` new tokens, no stop token, the same prompt ids for both:
a fixed pseudo-random text of ``--prompt_tokens`` ids (a random model has no tokenizer). Run from
the repository root (``--quick``: a tiny shape, a smoke test of a minute or two):

  python scripts/bench_families.py --output=/tmp/bench_families.md
"""

from __future__ import annotations

import datetime
import functools
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub import

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from benchlib import family_report

import specjax
from specjax.decode import AUTOREGRESSIVE, DecodeConfig, generate
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.models import PureModel, load_pretrained, truncated
from specjax.sampling import SamplingParams

# name -> (what it exercises, its config keys from the window W, head_dim E and layer count N);
# {windows} becomes "W=… on k of N layers", counted from the config specjax loaded
FAMILIES: dict[str, tuple[str, Callable[[int, int, int], dict]]] = {
    "llama": (
        "Llama 3 RoPE scaling (llama3, factor 32)",
        lambda w, e, n: {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            }
        },
    ),
    "mistral": ("{windows}", lambda w, e, n: {"sliding_window": w, "rope_parameters": _rope(1e6)}),
    "qwen2": ("q/k/v biases", lambda w, e, n: {"rope_parameters": _rope(1e6)}),
    "qwen3": ("per-head q/k RMSNorm", lambda w, e, n: {"rope_parameters": _rope(1e6)}),
    "gemma2": (
        "soft-caps 50/30, {windows}, query_pre_attn_scalar, 1+w and post norms, GeGLU, "
        "embedding scale",
        lambda w, e, n: {
            "rope_parameters": _rope(10000.0),
            "sliding_window": w,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "query_pre_attn_scalar": 2 * e,  # not head_dim, so that the switch matters
        },
    ),
    "gemma3_text": (
        "{windows}, local RoPE base 10k (global 1M), q/k norms, 1+w and post norms, GeGLU, "
        "query_pre_attn_scalar",
        lambda w, e, n: {
            "rope_parameters": {
                "sliding_attention": _rope(10000.0),
                "full_attention": _rope(1e6),
            },
            "sliding_window": w,
            "query_pre_attn_scalar": 2 * e,
            "layer_types": gemma3_layers(n),
        },
    ),
}

SHAPE = {  # Qwen2.5-0.5B's, but for the vocabulary
    "vocab": (32768, "Vocabulary size (Qwen2.5-0.5B: 151936; cut so the layers take the time)."),
    "hidden": (896, "Model width D (head_dim = D / heads)."),
    "layers": (24, "Decoder layers."),
    "heads": (14, "Query heads."),
    "kv_heads": (2, "Key/value heads."),
    "ffn": (4864, "MLP hidden width."),
}
QUICK = dict(
    vocab=512, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, self_layers=1,
    new_tokens=12, prompt_tokens=24, window=16, repeats=1,
)  # fmt: skip

_FAMILIES = flags.DEFINE_list("families", list(FAMILIES), "Families to run.")
_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 128, "Tokens generated per generation.")
_PROMPT_TOKENS = flags.DEFINE_integer("prompt_tokens", 200, "Prompt length in ids.")
_WINDOW = flags.DEFINE_integer("window", 128, "Sliding window W (< prompt + new tokens).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed interleaved rounds (median).", lower_bound=1)
_DRAFT_LEN = flags.DEFINE_integer("draft_len", 4, "Draft length L (n-gram, self-draft, HF).")
_SELF_LAYERS = flags.DEFINE_integer("self_layers", 6, "Layers of the self-draft.")
for _name, (_default, _help) in SHAPE.items():
    flags.DEFINE_integer(_name, _default, _help)
_THREADS = flags.DEFINE_integer("threads", 2, "torch.set_num_threads for transformers.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown report to this file.")
_QUICK = flags.DEFINE_bool("quick", False, "Smoke run (flags given explicitly still win).")
flags.register_validator(
    "families", lambda names: set(names) <= set(FAMILIES), f"each one of {list(FAMILIES)}"
)

GREEDY = SamplingParams(temperature=0.0)
LOGIT_RTOL = 1e-4
ROWS = ("hf_ar", "hf_pl", "sj_ar", "sj_ngram", "sj_self")

value = functools.partial(benchlib.quick_value, quick=QUICK)
"""A flag's value, or its ``--quick`` value unless given on the command line."""


def _rope(theta: float) -> dict:
    return {"rope_type": "default", "rope_theta": theta}


def gemma3_layers(n: int) -> list[str]:
    """Gemma 3's pattern (every sixth layer global), with the last layer global when ``n`` < 6
    so that ``--quick``'s few layers still have one."""
    full = {i for i in range(n) if (i + 1) % 6 == 0} or {n - 1}
    return ["full_attention" if i in full else "sliding_attention" for i in range(n)]


# ---------------------------------------------------------------------------- models


def hf_model(torch, transformers, family: str):
    """A random transformers model of ``family`` at the flags' shape, eval mode, fp32."""
    hidden, heads = value("hidden"), value("heads")
    head_dim = hidden // heads
    keys = dict(
        vocab_size=value("vocab"), hidden_size=hidden, num_hidden_layers=value("layers"),
        num_attention_heads=heads, num_key_value_heads=value("kv_heads"), head_dim=head_dim,
        intermediate_size=value("ffn"), max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=True,  # as Qwen2.5-0.5B and both Gemmas
    )  # fmt: skip
    keys |= FAMILIES[family][1](value("window"), head_dim, value("layers"))
    config = transformers.AutoConfig.for_model(family, **keys)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    off_init(torch, model)
    return model


def off_init(torch, model) -> None:
    """Adds N(0, 0.1²) to every norm weight and bias: transformers initialises them to 1 (0 for
    Gemma's 1 + w) and 0, where a loader that dropped a q/k norm or a bias would go unnoticed."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))


def prompt_ids(n: int, vocab: int) -> list[int]:
    """``n`` fixed ids that repeat like prose: words of 1-3 ids drawn from a 1000-word lexicon
    with Zipf frequencies (a random model has no tokenizer; pure noise would give prompt lookup
    nothing to match, which real text does)."""
    rng = np.random.default_rng(0)
    lexicon = [rng.integers(0, vocab, rng.integers(1, 4)).tolist() for _ in range(1000)]
    zipf = 1.0 / np.arange(1, len(lexicon) + 1)
    ids: list[int] = []
    while len(ids) < n:
        ids += lexicon[rng.choice(len(lexicon), p=zipf / zipf.sum())]
    return ids[:n]


def logit_error(torch, hf, pre, ids: list[int]) -> float:
    """max |specjax - transformers| / max |transformers| over the prompt's logits."""
    with torch.inference_mode():
        ref = hf(torch.tensor([ids])).logits.float().numpy()
    ours = np.asarray(pre.model(jnp.asarray([ids], jnp.int32)).logits)
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


# ---------------------------------------------------------------------------- runs


def hf_run(torch, model, ids: list[int], n: int, **kwargs) -> Callable[[], dict]:
    """transformers' greedy ``generate`` of exactly ``n`` tokens (no EOS): ids, seconds and
    target forwards (a hook count, for prompt lookup's tokens per call)."""
    x = torch.tensor([ids])
    kwargs |= dict(attention_mask=torch.ones_like(x), do_sample=False, eos_token_id=None)
    kwargs |= dict(max_new_tokens=n, min_new_tokens=n)
    calls = [0]

    def run() -> dict:
        calls[0] = 0
        handle = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        try:
            with torch.inference_mode():
                out, seconds = benchlib.timed(lambda: model.generate(x, **kwargs))
        finally:
            handle.remove()
        new = out[0, len(ids) :].tolist()
        assert len(new) == n, f"transformers generated {len(new)} tokens, not {n}"
        per_call = (n - 1) / max(calls[0] - 1, 1)
        return dict(ids=new, seconds=seconds, compile_s=0.0, per_call=per_call)

    return run


def specjax_run(target, ids: list[int], n: int, drafter=None) -> Callable[[], dict]:
    """specjax's greedy generation of exactly ``n`` tokens: ids, seconds (compilation apart),
    compile seconds, acceptance rate and tokens per target step."""
    verifier = AUTOREGRESSIVE if drafter is None else "greedy"
    config = DecodeConfig(verifier, GREEDY, max_new_tokens=n, stop_tokens=())

    def run() -> dict:
        gen = generate(target, [ids], config, drafter, seed=0)
        m = gen.metrics
        assert len(gen.tokens[0]) == n, f"specjax generated {len(gen.tokens[0])} tokens, not {n}"
        return dict(
            ids=gen.tokens[0], seconds=m.seconds, compile_s=m.compile_seconds,
            accept=m.acceptance_rate, per_call=m.block_efficiency,
        )  # fmt: skip

    return run


def measure(runs: dict[str, Callable[[], dict]], repeats: int) -> dict[str, dict]:
    """One warm-up of each run (its compile time kept), then ``repeats`` rounds calling them in
    turn, so that load from elsewhere hits every configuration alike: the last round's results
    with the median seconds."""
    warm = {name: run() for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(repeats):
        last = {name: run() for name, run in runs.items()}  # in turn, in ROWS order
        for name, out in last.items():
            times[name].append(out["seconds"])
        benchlib.log(
            f"  round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
        )
    return {
        name: {**last[name], "compile_s": warm[name]["compile_s"], "seconds": statistics.median(t)}
        for name, t in times.items()
    }


def windows(config) -> str:
    """Which layers slide, by how much, from the config specjax loaded (what it applies)."""
    k, n = config.layer_types.count("sliding"), config.num_layers
    where = "every layer" if k == n else f"{k} of {n} layers"
    return f"sliding window W={config.sliding_window} on {where}"


def bench_family(torch, transformers, family: str, ids: list[int], n: int) -> dict:
    """Builds, saves, loads and checks ``family``'s model, then times its five configurations."""
    start = time.perf_counter()
    benchlib.log(f"{family}: building")
    hf = hf_model(torch, transformers, family)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)  # fp32 safetensors
        pre = load_pretrained(tmp)
    err = logit_error(torch, hf, pre, ids)
    attn = hf.config._attn_implementation
    benchlib.log(f"{family}: logits rel. err {err:.2g}; transformers attention {attn}")
    if err > LOGIT_RTOL:
        benchlib.log(f"LOGIT MISMATCH: {family} {err:.3g} > {LOGIT_RTOL}")
    target, l = PureModel.of(pre.model), value("draft_len")
    ngram = NgramDrafter(pre.config.vocab_size, num_paths=1, draft_len=l, max_ngram=3, min_ngram=1)
    draft = truncated(pre.model, value("self_layers"))
    self_draft = ModelDrafter(draft, num_paths=1, draft_len=l, sampling=GREEDY)
    runs = {
        "hf_ar": hf_run(torch, hf, ids, n),
        "hf_pl": hf_run(torch, hf, ids, n, prompt_lookup_num_tokens=l),
        "sj_ar": specjax_run(target, ids, n),
        "sj_ngram": specjax_run(target, ids, n, ngram),
        "sj_self": specjax_run(target, ids, n, self_draft),
    }
    results = measure(runs, value("repeats"))
    exercises = FAMILIES[family][0]
    if pre.config.sliding_window:
        exercises = exercises.format(windows=windows(pre.config))
    results["info"] = dict(
        err=err, attn=attn, params=hf.num_parameters(), exercises=exercises,
        seconds=time.perf_counter() - start,
    )  # fmt: skip
    benchlib.log(f"{family}: done in {results['info']['seconds']:.0f} s")
    return results


def main(argv):
    del argv
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f'bench_families needs {e.name}: pip install -e ".[peer]"')
    logging.set_verbosity(logging.WARNING)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(_THREADS.value)
    t0, load = time.perf_counter(), os.getloadavg()[0]
    n, ids = value("new_tokens"), prompt_ids(value("prompt_tokens"), value("vocab"))
    results = {f: bench_family(torch, transformers, f, ids, n) for f in _FAMILIES.value}
    info = [r["info"] for r in results.values()]
    params = sorted({f"{i['params'] / 1e6:.1f}M" for i in info})
    attn = ", ".join(f"{f} {r['info']['attn']}" for f, r in results.items())
    header = (
        f"`{benchlib.command()}` on {benchlib.machine(verbose=True)}; "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; specjax source "
        f"{benchlib.source_digest(pathlib.Path(specjax.__file__).parent, recursive=True)}; torch "
        f"{torch.__version__} ({_THREADS.value} threads), transformers {transformers.__version__}; "
        f"total {time.perf_counter() - t0:.0f} s; 1-min load average {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after (near 0 when nothing else competes for the cores)."
    )
    hidden, heads = value("hidden"), value("heads")
    rows = family_report.table(results, n, ROWS, LOGIT_RTOL)
    report = family_report.REPORT.format(
        header=header, table=rows, hidden=hidden, layers=value("layers"),
        heads=heads, kv_heads=value("kv_heads"), head_dim=hidden // heads, ffn=value("ffn"),
        vocab=value("vocab"), params=" to ".join(params), rtol=LOGIT_RTOL, prompt_tokens=len(ids),
        n=n, window=value("window"), repeats=value("repeats"), l=value("draft_len"),
        self_layers=value("self_layers"), threads=_THREADS.value, attn=attn,
    )  # fmt: skip
    benchlib.write_report(report, _OUTPUT.value)
    if any(i["err"] > LOGIT_RTOL for i in info):
        sys.exit("error: specjax's logits differ from transformers' (see the table)")


if __name__ == "__main__":
    app.run(main)
