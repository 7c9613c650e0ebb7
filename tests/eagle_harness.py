"""The harness of the EAGLE-3 layout tests: tiny family targets, random heads of both published
layouts written to disk, specjax's first-step and chained draft logits and the NumPy reference's
(``tests/eagle_reference.py``) for the same pairs, and the cases they run."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.models import load_pretrained
from specjax.models.cache import KVCache
from specjax.models.eagle_formats import detect_format, load_head
from specjax.sampling import SamplingParams
from tests import eagle_heads as heads
from tests import eagle_reference as ref
from tests.family_fixtures import directory

TOL = 1e-4
STEPS = 4  # the first step and three chained ones
GREEDY = SamplingParams(temperature=0.0)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
LINEAR = {"rope_type": "linear", "factor": 3.0}


@pytest.fixture(scope="module")
def targets():
    return {f: load_pretrained(directory(f)).model for f in ("qwen3", "gemma2")}


def tokens_for(target, n: int = 11, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, target.config.vocab_size, n)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _block_outputs(graphdef, state, tokens, layers):
    return nnx.merge(graphdef, state)(tokens, features=layers).features


def block_outputs(target, tokens, layers) -> jax.Array:
    """``[B, T, A, D_t]`` the target's block outputs ``layers`` (-1: the embeddings) at every
    position of ``tokens [B, T]`` (or ``[T]``: B = 1), compiled once per target and layers."""
    tokens = jnp.asarray(tokens, jnp.int32)
    tokens = tokens[None] if tokens.ndim == 1 else tokens
    return _block_outputs(*nnx.split(target), tokens, tuple(layers))


CAPACITY = 64


@jax.jit
def _propose(drafter, prompts, lengths, features, key):
    b = prompts.shape[0]
    state = drafter.init(prompts, lengths, CAPACITY, features=features)
    padded = jnp.zeros((b, CAPACITY), jnp.int32).at[:, : prompts.shape[1]].set(prompts)
    return drafter.propose(state, jax.random.split(key, b), padded, lengths)[0]


def propose(drafter, target, prompts, seed: int = 0):
    """The drafter's :class:`~specjax.drafters.base.Draft` after the prompts (a batch of mixed
    lengths), as the decoding loop makes it: ``init`` on the prefill's features, ``propose``."""
    width = max(map(len, prompts))
    toks = jnp.asarray([list(p) + [0] * (width - len(p)) for p in prompts], jnp.int32)
    feats = block_outputs(target, toks, drafter.feature_layers)[:, :-1]
    lengths = jnp.asarray([len(p) for p in prompts], jnp.int32)
    return _propose(drafter, toks, lengths, feats, jax.random.key(seed))


@functools.partial(jax.jit, static_argnums=(0, 4))
def _chained(graphdef, state, feats, tokens, steps):
    head = nnx.merge(graphdef, state)
    n = tokens.shape[0]
    g = head.fuse(jnp.concatenate([jnp.zeros_like(feats[:, :1]), feats[:, :-1]], axis=1))
    b = n - 1
    cache = KVCache.init(head.config, b, n + steps)
    h, logits, cache = head(
        jnp.broadcast_to(g, (b, *g.shape[1:])), jnp.broadcast_to(tokens, (b, n)), cache=cache
    )
    out = [logits[0, 1:]]
    t = jnp.arange(1, n)  # row i's pair
    cache = cache.rollback(t + 1)
    g = h[jnp.arange(b), t][:, None]
    for j in range(1, steps):
        g, lg, cache = head(g, tokens[jnp.minimum(t + j, n - 1)][:, None], cache=cache)
        out.append(lg[:, 0])
    return jnp.stack(out)


def specjax_logits(head, target, tokens, steps: int = STEPS) -> np.ndarray:
    """``[J, n - 1, W]`` specjax's logits laid out as :func:`eagle_reference.draft_logits`.

    Pair t = (fused feature of position t - 1, x_t) at slot t is the peers' row t - 1 (pair 0,
    feature zero, is hidden from the others). Step j >= 1 at row i drafts from a cache rolled
    back to pairs 0 .. i + 1 plus the row's own steps 1 .. j - 1: the head on (its previous
    output, x_{i+1+j}). The rows are one batch, each with its own cache length."""
    tokens = jnp.asarray(tokens, jnp.int32)
    feats = block_outputs(target, tokens, head.config.feature_layers)
    return np.asarray(_chained(*nnx.split(head), feats, tokens, steps))


def max_differences(ours: np.ndarray, want: np.ndarray) -> list[float]:
    """Per step, the largest |difference| over the rows whose teacher tokens exist."""
    n = ours.shape[1] + 1
    return [
        float(np.abs(ours[j, : n - 1 - j] - want[j, : n - 1 - j]).max()) for j in range(len(ours))
    ]


def aux_of(cfg, target, tokens) -> np.ndarray:
    inputs = ref.block_inputs(cfg, target.config.num_layers)
    return ref.aux_hidden_states(target, tokens, inputs, block_outputs)


def reference_logits(cfg, tensors, target, tokens, steps: int = STEPS) -> np.ndarray:
    aux = aux_of(cfg, target, tokens)
    return ref.draft_logits(cfg, tensors, aux, tokens, steps, np.asarray(target.embed[...]))


def make_head(tmp_path, target, kind, name="head", **kw):
    c = target.config
    cfg, tensors = heads.random_head(
        tmp_path / name, kind, vocab=c.vocab_size, target_dim=c.dim, **kw
    )
    return cfg, tensors, tmp_path / name


# --- parity with the reference ------------------------------------------------------------------

CASES = {
    # eagle, one layer, every switch off, W < V, SpecForge's eagle_config ids (block outputs)
    "eagle-plain": ("qwen3", "eagle", dict(layer_ids=[0, 1, 2], draft_vocab=100)),
    # speculators, two layers, biases, a Qwen3-type layer, fc_norm + norm_output +
    # norm_before_residual, Llama 3.1 RoPE
    "speculators-3.1": (
        "qwen3",
        "speculators",
        dict(
            layer_ids=[1, 2, 3],
            num_layers=2,
            attention_bias=True,
            layer_type="qwen3",
            draft_vocab=64,
            fc_norm=True,
            norm_output=True,
            norm_before_residual=True,
            rope_scaling=LLAMA3,
        ),
    ),
    # eagle (ModelOpt's midlayer.{i}), a head wider than its target (own embedding),
    # norm_before_fc, linear RoPE in rope_parameters, top-level ids (block inputs: 0 is the
    # embeddings, 4 the final hidden state)
    "eagle-wide": (
        "gemma2",
        "eagle",
        dict(
            dim=48,
            num_layers=2,
            layer_ids=[0, 2, 4],
            nested_ids=False,
            norm_before_fc=True,
            rope_scaling=LINEAR,
            rope_style="parameters",
            draft_vocab=200,
        ),
    ),
    # speculators, no ids (the default inputs), W = V (no d2t), the target's embedding, GQA 4/1
    "speculators-default": (
        "gemma2",
        "speculators",
        dict(ship_embed=False, norm_output=True, num_kv_heads=1, head_dim=8, rope_theta=10000.0),
    ),
}
SLOW_CASES = {
    f"{kind}-{fam}-{switch}": (fam, kind, dict(layer_ids=ids, draft_vocab=150, **{switch: True}))
    for fam, kind, ids in (
        ("qwen3", "eagle", [0, 1, 2]),  # eagle_config ids: block outputs
        ("qwen3", "speculators", [1, 2, 3]),  # block inputs
        ("gemma2", "eagle", [1, 2, 3]),
        ("gemma2", "speculators", [2, 3, 4]),
    )
    for switch in ("norm_before_residual", "fc_norm", "norm_before_fc", "norm_output")
} | {
    "eagle-qwen3-narrow-3layers": (
        "qwen3",
        "eagle",
        dict(dim=24, num_heads=3, num_kv_heads=3, head_dim=8, num_layers=3, attention_bias=True),
    ),
    "speculators-gemma2-llama3-bias": (
        "gemma2",
        "speculators",
        dict(
            layer_ids=[0, 1, 4], attention_bias=True, rope_scaling=LLAMA3, rope_style="parameters"
        ),
    ),
}


def check_parity(targets, tmp_path, fam, kind, kw):
    target = targets[fam]
    cfg, tensors, path = make_head(tmp_path, target, kind, **kw)
    assert detect_format(path) == kind
    head = load_head(path, target)
    tokens = tokens_for(target)
    diffs = max_differences(
        specjax_logits(head, target, tokens), reference_logits(cfg, tensors, target, tokens)
    )
    print(f"{kind} on {fam} {kw}: max |specjax - reference| per step {diffs}")
    assert max(diffs) < TOL, diffs
