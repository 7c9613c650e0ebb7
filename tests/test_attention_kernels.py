"""Kernel-backed decode attention (``specjax.models.attention_kernels``): the committed prefix by
JAX's split-K Pallas decode kernel (interpret mode on this CPU) or by
``jax.nn.dot_product_attention`` (cuDNN's call; here its XLA implementation, the same merge),
the new tokens' block densely, merged by log-sum-exp, equals the XLA path
(:func:`~specjax.models.attention.attend_windows`) within 1e-5 in fp32; a tiny model's logits
and greedy tokens do not change with the switch."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.experimental.pallas.ops.gpu import decode_attention

from specjax import tree
from specjax.models import Decoder, KVCache, attention
from specjax.models import attention_kernels as kernels
from specjax.testing import tiny_config

TOL = 2e-6
"""fp32, one attention call: the merges only reorder the softmax's sums (observed at most 4.8e-7
here, on a 2-core EPYC)."""

MODEL_TOL = 1e-5
"""fp32, a 2-layer model's logits (observed at most 2.4e-6)."""


def inputs(seed, t, lengths, s=100, g=2, r=2, e=8, n=2):
    """Queries ``[B, T, G, R, E]`` and a stacked cache of ``n`` layers, finite everywhere (a
    decode kernel reads a row's stale slots up to its block's end: they are masked, and in a
    cache they are old entries or zeros)."""
    b = len(lengths)
    keys = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(keys[0], (b, t, g, r, e))
    cache_k, cache_v = (jax.random.normal(keys[i], (n, b, s, g, e)) for i in (1, 2))
    return q, cache_k, cache_v, jnp.asarray(lengths, jnp.int32)


def causal(b, t):
    return jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))


def tree_of(b, k, depth):
    return jnp.broadcast_to(
        jnp.asarray(tree.tree_mask(k, depth)), (b, *(tree.tree_size(k, depth),) * 2)
    )


def both(q, cache_k, cache_v, lengths, mask, kernel, layer=1, **kw):
    """The kernel path's output and the reference's (:func:`attend_windows`), each jitted, and
    their largest difference."""
    kw = dict(scale=q.shape[-1] ** -0.5, dtype=jnp.float32, **kw)
    ref = jax.jit(lambda *a: attention.attend_windows(*a[:3], layer, *a[3:], **kw))
    sdpa = dict(sdpa="xla") if kernel == "cudnn" else {}  # cuDNN's call, XLA's implementation
    run = jax.jit(
        lambda *a: kernels.attend_kernel(*a[:3], layer, *a[3:], kernel=kernel, **sdpa, **kw)
    )
    want = ref(q, cache_k, cache_v, lengths, mask)
    got = run(q, cache_k, cache_v, lengths, mask)
    return np.asarray(got), np.asarray(want), float(jnp.max(jnp.abs(got - want)))


CASES = {  # name: (T, mask of B rows, lengths); lengths + T <= S = 100
    "decode": (1, lambda b: causal(b, 1), (0, 3, 64, 90)),
    "chain": (4, lambda b: causal(b, 4), (0, 17, 63, 96)),
    "tree": (7, lambda b: tree_of(b, 3, 2), (0, 40, 64, 93)),  # K = 3 paths of 2
}


@pytest.mark.parametrize(
    "kernel,case",
    [
        ("pallas", "decode"),
        ("pallas", "chain"),
        ("pallas", "tree"),
        ("cudnn", "decode"),
        pytest.param("cudnn", "chain", marks=pytest.mark.slow),  # the same merge as "tree"
        ("cudnn", "tree"),
    ],
)
def test_the_kernel_path_equals_the_windows(kernel, case):
    """Rows of lengths 0 .. 96 (a prefix of none, one inside the kernel's first block, one
    ending at its last block, one in the 36 slots past it: 100 = 64 + 36), G = 2 key/value
    heads of R = 2 queries; a tree of 3 paths with R = 3 (21 query rows per key/value head: two
    of the kernel's 16-row blocks). ``"cudnn"``: windows of 16 .. 100 slots."""
    t, mask, lengths = CASES[case]
    q, ck, cv, lengths = inputs(0, t, lengths, r=3 if case == "tree" else 2)
    got, _, diff = both(q, ck, cv, lengths, mask(len(lengths)), kernel, smallest=16)
    assert np.isfinite(got).all()
    assert diff <= TOL, diff


@pytest.mark.parametrize("s", [12, pytest.param(64, marks=pytest.mark.slow), 40])
def test_capacities_the_block_does_not_divide(s):
    """A cache under 16 slots (all of it dense), one block exactly, and a 32-slot block with 8
    slots past it."""
    q, ck, cv, lengths = inputs(1, 4, (0, 2, s - 6, s - 4), s=s)
    *_, diff = both(q, ck, cv, lengths, causal(4, 4), "pallas", layer=0)
    assert diff <= TOL, diff


def test_a_sliding_window_of_one_new_token():
    """T = 1: each row's window is the kernel's start (committed slots > position - W)."""
    q, ck, cv, lengths = inputs(2, 1, (0, 5, 70, 95))
    positions = lengths[:, None]
    kw = dict(positions=positions, window=9)
    _, want, diff = both(q, ck, cv, lengths, causal(4, 1), "pallas", **kw)
    assert diff <= TOL, diff
    _, whole, _ = both(q, ck, cv, lengths, causal(4, 1), "pallas")
    assert np.abs(whole - want).max() > 1e-2  # the window did change the output


def test_the_in_place_call_is_jax_gqa():
    """The kernel over the stacked cache in place gives what JAX's ``gqa`` wrapper (which
    transposes a layer's cache to ``[B, G, S, E]``) gives: the same un-normalised output, sum
    and maximum of the prefix, T * R query rows per key/value head."""
    b, t, g, r, e, s = 3, 2, 2, 3, 16, 128
    q, ck, cv, lengths = inputs(3, t, (0, 50, 128), s=s, g=g, r=r, e=e)
    start = jnp.asarray([0, 7, 0], jnp.int32)
    part = kernels.prefix_pallas(q, ck, cv, 1, lengths, start, 0.3, 32, True, splits=4)
    peak = jnp.max(part.top, axis=0)
    fade = jnp.exp(part.top - peak)
    total = jnp.sum(part.total * fade, axis=0)  # [B, T, G, R]
    acc = jnp.sum(part.acc * fade[..., None], axis=0)
    heads = jnp.transpose(q, (0, 2, 1, 3, 4)).reshape(b, g * t * r, e)  # head (g, t, r)
    kw = dict(sm_scale=0.3, block_k=32, k_splits=4, interpret=True, return_residuals=True)
    o, (l, m) = decode_attention.gqa(
        heads, ck[1], cv[1], start, lengths, normalize_output=False, **kw
    )

    def ours(x):  # [B, T, G, R, ...] -> [B, G * T * R, ...]
        x = jnp.moveaxis(x, 2, 1)
        return x.reshape(b, g * t * r, *x.shape[4:])

    some = np.asarray(lengths > start)[:, None]  # the empty row's maximum is the float32 min
    np.testing.assert_allclose(np.where(some, ours(peak), 0), np.where(some, m, 0), rtol=1e-6)
    np.testing.assert_allclose(ours(total), l, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours(acc), o, rtol=1e-5, atol=1e-5)


def test_layers_the_kernel_cannot_take_fall_back_to_xla(monkeypatch):
    """Soft-capped scores, a level mask (a tree grown over several calls) and a sliding window
    with T > 1 take the XLA path: the same numbers as with the switch off."""
    q, ck, cv, lengths = inputs(4, 3, (0, 10, 40, 90))
    mask = causal(4, 3)
    positions = lengths[:, None] + jnp.arange(3)
    level = tree.level_kv_mask(jnp.broadcast_to(lengths[:, None] - 1, (4, 3)).clip(0), lengths, 1)
    kw = dict(scale=0.3, dtype=jnp.float32, positions=positions)
    calls = {
        "softcap": (None, dict(softcap=5.0)),
        "level mask": (level, {}),
        "window": (None, dict(window=4)),
    }

    def attend(kernel, kv_mask, extra):
        monkeypatch.setattr(attention, "KERNEL", kernel)
        run = jax.jit(lambda *a: attention.attend(*a[:3], 0, *a[3:], **kw, **extra))
        return run(q, ck, cv, lengths, mask, kv_mask)

    for name, (kv_mask, extra) in calls.items():
        want = attend("xla", kv_mask, extra)
        np.testing.assert_array_equal(attend("pallas", kv_mask, extra), want, err_msg=name)
    assert kernels.fallback("pallas", q[..., :6], ck, jnp.float32) is not None  # E = 6


def test_cudnn_is_refused_off_a_gpu(monkeypatch):
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU runs cuDNN")
    before = attention.KERNEL
    with pytest.raises(ValueError, match="'cudnn' needs a GPU"):
        attention.set_kernel("cudnn")
    assert attention.KERNEL == before
    with pytest.raises(ValueError, match="unknown attention kernel"):
        attention.set_kernel("flash")
    monkeypatch.setattr(attention, "KERNEL", "cudnn")  # set directly: refused while tracing
    q, ck, cv, lengths = inputs(5, 1, (3,))
    with pytest.raises(ValueError, match="'cudnn' needs a GPU"):
        attention.attend(q, ck, cv, 0, lengths, causal(1, 1), scale=0.3, dtype=jnp.float32)


def test_set_kernel_returns_the_previous_value(monkeypatch):
    monkeypatch.setattr(attention, "KERNEL", "xla")
    assert attention.set_kernel("pallas") == "xla"
    assert attention.KERNEL == "pallas"
    assert attention.set_kernel("xla") == "pallas"


def test_the_environment_sets_the_kernel_of_a_process():
    """``SPECJAX_ATTENTION_KERNEL`` (how a benchmark is A/B'd without a flag of its own)."""
    code = "from specjax.models import attention; print(attention.KERNEL)"
    env = {**os.environ, "SPECJAX_ATTENTION_KERNEL": "pallas"}
    root = pathlib.Path(__file__).parents[1]  # this checkout's specjax
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True)
    assert out.stdout.decode().split() == ["pallas"], out.stderr.decode()[-2000:]


def run_model(model, monkeypatch, kernel, capacity=100, steps=6):
    """Logits of a 40-token prefill of 3 rows, of a 7-node tree after rows of 40, 23 and 9
    tokens, and of ``steps`` greedy one-token calls from there, with attention.KERNEL =
    ``kernel``; and the greedy tokens."""
    monkeypatch.setattr(attention, "KERNEL", kernel)
    tokens = jax.random.randint(jax.random.key(1), (3, 40), 0, model.config.vocab_size)
    cache = KVCache.init(model.config, 3, capacity)
    depth = jnp.asarray(tree.tree_depths(3, 2))
    lengths = jnp.asarray([40, 23, 9], jnp.int32)
    mask = tree_of(3, 3, 2)
    call = nnx.jit(lambda m, x, c: m(x, cache=c))  # traced anew under this patch
    tree_call = nnx.jit(
        lambda m, x, c: m(x, cache=c, positions=c.lengths[:, None] + depth, attn_mask=mask)
    )
    logits, c, _ = call(model, tokens, cache)
    c = c.rollback(lengths)
    out = [logits, tree_call(model, tokens[:, :7], c).logits]
    last, greedy = tokens[jnp.arange(3), lengths - 1][:, None], []
    for _ in range(steps):
        logits, c, _ = call(model, last, c)
        out.append(logits)
        last = jnp.argmax(logits[:, -1:], axis=-1)
        greedy.append(np.asarray(last[:, 0]))
    monkeypatch.undo()
    return [np.asarray(x) for x in out], np.stack(greedy, axis=1)


def test_model_logits_and_greedy_tokens_do_not_depend_on_the_kernel(monkeypatch):
    """A tiny random Llama-like decoder (2 layers, 4 query / 2 key/value heads): a prefill, a
    tree call and six cached greedy steps on a cache of 100 slots (a 64-slot block and 36
    dense), logits within 1e-5 of the XLA path's and the same tokens."""
    model = Decoder(tiny_config(48), rngs=nnx.Rngs(0))
    want, tokens = run_model(model, monkeypatch, "xla")
    calls = []
    attend_kernel = kernels.attend_kernel
    monkeypatch.setattr(
        kernels, "attend_kernel", lambda *a, **k: calls.append(1) or attend_kernel(*a, **k)
    )
    got, got_tokens = run_model(model, monkeypatch, "pallas")
    assert len(calls) == 3 * 2  # traced: prefill, tree and one-token calls, 2 layers each
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=MODEL_TOL, rtol=0)
    np.testing.assert_array_equal(got_tokens, tokens)
