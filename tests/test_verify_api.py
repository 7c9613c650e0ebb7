"""API-level properties of every verifier: registry, errors, jit/vmap, keys, degenerate inputs,
temperature 0, K = 1 equivalence, import purity and sharded inputs."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verify
from specjax.verify import synthetic

CHAIN = ["greedy", "token", "block"]
MULTI = ["specinfer", "specinfer_wor", "spectr", "gbv"]


def multipath(name):
    if name == "specinfer_wor":
        return lambda *a, **kw: verify.specinfer_verify(*a, replacement=False, **kw)
    return verify.get(name)


@functools.cache
def jitted(name):
    """The verifier under ``jax.jit``, compiled once per shape for every test."""
    return jax.jit(multipath(name) if name in MULTI else verify.get(name))


def make_draft(seed=0, b=6, k=3, l=4, v=11, noise=0.8, replacement=True):
    family = synthetic.SyntheticFamily(vocab_size=v, draft_noise=noise, seed=seed)
    return synthetic.sample_draft(jax.random.key(seed), family, b, k, l, replacement=replacement)


def as_tuple(result):
    return tuple(np.asarray(x) for x in result)


def test_registry_and_unknown_name():
    assert set(verify.VERIFIERS) == {"greedy", "token", "block", "specinfer", "spectr", "gbv"}
    assert verify.get("block") is verify.block_verify
    assert verify.is_multipath("gbv") and not verify.is_multipath("token")
    with pytest.raises(ValueError, match=r"unknown verifier 'blok'.*block"):
        verify.get("blok")


@pytest.mark.parametrize("name", CHAIN)
def test_chain_shape_errors(name):
    f = verify.get(name)
    key = jax.random.key(0)
    toks = jnp.zeros((2, 3), jnp.int32)
    q = jnp.full((2, 3, 5), 0.2)
    p = jnp.full((2, 4, 5), 0.2)
    with pytest.raises(
        ValueError, match=r"target_probs must be \[B, L\+1, V\] = \[2, 4, 5\].*\(2, 4, 6\)"
    ):
        f(key, toks, q, jnp.full((2, 4, 6), 1 / 6))
    with pytest.raises(ValueError, match=r"draft_probs must be \[B, L, V\].*\(2, 2, 5\)"):
        f(key, toks, q[:, :2], p)
    with pytest.raises(ValueError, match=r"draft_tokens must be \[B, L\]"):
        f(key, toks[:, None], q, p)
    with pytest.raises(ValueError, match=r"num_draft must be \[B\] = \[2\]"):
        f(key, toks, q, p, num_draft=jnp.ones((3,), jnp.int32))


@pytest.mark.parametrize("name", ["specinfer", "spectr", "gbv"])
def test_multipath_shape_errors(name):
    f = verify.get(name)
    key = jax.random.key(0)
    toks = jnp.zeros((2, 2, 3), jnp.int32)
    q = jnp.full((2, 2, 3, 5), 0.2)
    with pytest.raises(
        ValueError, match=r"target_probs must be \[B, K, L\+1, V\] = \[2, 2, 4, 5\]"
    ):
        f(key, toks, q, jnp.full((2, 2, 4, 7), 1 / 7))
    with pytest.raises(ValueError, match=r"draft_tokens must be \[B, K, L\]"):
        f(key, toks[:, 0], q, jnp.full((2, 2, 4, 5), 0.2))
    with pytest.raises(ValueError, match=r"num_draft must be \[B, K\] = \[2, 2\]"):
        f(key, toks, q, jnp.full((2, 2, 4, 5), 0.2), num_draft=jnp.ones((2,), jnp.int32))


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2, 3))])
def test_k1_multipath_equals_chain_bit_for_bit(seed):
    d = make_draft(seed, b=16, k=1, v=6)  # the chain shapes of test_temperature_zero_...
    for i in range(10):
        key = jax.random.key(100 * seed + i)
        tok = as_tuple(
            jitted("token")(key, d.tokens[:, 0], d.draft_probs[:, 0], d.target_probs[:, 0])
        )
        blk = as_tuple(
            jitted("block")(key, d.tokens[:, 0], d.draft_probs[:, 0], d.target_probs[:, 0])
        )
        for name, want in [
            ("specinfer", tok),
            ("specinfer_wor", tok),
            ("spectr", tok),
            ("gbv", blk),
        ]:
            got = as_tuple(jitted(name)(key, d.tokens, d.draft_probs, d.target_probs))
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize(
    "name",
    [n if n == "gbv" else pytest.param(n, marks=pytest.mark.slow) for n in CHAIN + MULTI],
)
def test_jit_equals_eager_and_vmap_equals_loop(name):
    d = make_draft(3)
    if name in CHAIN:
        f = verify.get(name)
        args = (d.tokens[:, 0], d.draft_probs[:, 0], d.target_probs[:, 0])
    else:
        f = multipath(name)
        args = (d.tokens, d.draft_probs, d.target_probs)
    key = jax.random.key(7)
    eager = as_tuple(f(key, *args))
    jitted = as_tuple(jax.jit(f)(key, *args))
    for a, b in zip(eager, jitted, strict=True):
        np.testing.assert_array_equal(a, b)
    # vmap over a leading axis of independent problems (and keys) == a Python loop of eager
    # calls. (The vmapped verifier compiled: jit == eager is shown above, and eager, each of
    # its batched ops compiles on its own, 8 s on 2 cores.)
    keys = jax.random.split(key, 2)
    stacked = tuple(jnp.stack([x, x]) for x in args)
    vm = as_tuple(jax.jit(jax.vmap(f))(keys, *stacked))
    for i in range(2):
        one = as_tuple(f(keys[i], *args))
        for a, b in zip(vm, one, strict=True):
            np.testing.assert_array_equal(a[i], b)


def greedy_multipath_expected(tokens, target_probs, num_draft=None):
    """Longest path prefix matching the target's greedy continuation; argmax there."""
    b, k, l = tokens.shape
    n = np.full((b, k), l) if num_draft is None else np.asarray(num_draft)
    taus, nexts = [], []
    for i in range(b):
        best, best_path = -1, 0
        for j in range(k):
            t = 0
            while t < n[i, j] and tokens[i, j, t] == np.argmax(target_probs[i, j, t]):
                t += 1
            if t > best:
                best, best_path = t, j
        taus.append(best)
        nexts.append(int(np.argmax(target_probs[i, best_path, best])))
    return np.array(taus), np.array(nexts)


def one_hot_target(draft, v, seed, agree=0.7):
    """Temperature-0 target whose argmax often equals the drafted token (mixed accept lengths)."""
    rng = np.random.default_rng(seed)
    tokens = np.asarray(draft.tokens)
    b, k, l = tokens.shape
    # One greedy continuation per prefix: derive it from the prefix so shared prefixes agree.
    target = np.zeros((b, k, l + 1, v), np.float32)
    table = {}
    for i in range(b):
        for j in range(k):
            for t in range(l + 1):
                prefix = (i, *tokens[i, j, :t])
                if prefix not in table:
                    if t < l and rng.random() < agree:
                        table[prefix] = tokens[i, j, t]
                    else:
                        table[prefix] = rng.integers(v)
                target[i, j, t, table[prefix]] = 1.0
    return jnp.asarray(target)


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2))])
def test_temperature_zero_reduces_to_greedy(seed):
    v = 6
    d = make_draft(seed, b=16, k=3, l=4, v=v)
    p = one_hot_target(d, v, seed)
    key = jax.random.key(seed)
    # Chain verifiers against the chain greedy rule, with sampled and with one-hot drafts.
    want = as_tuple(jitted("greedy")(key, d.tokens[:, 0], d.draft_probs[:, 0], p[:, 0]))
    assert len(set(np.asarray(want[0]).tolist())) > 1  # the cases exercise several accept lengths
    onehot_q = jax.nn.one_hot(d.tokens[:, 0], v)
    for name in ["token", "block"]:
        for q in (d.draft_probs[:, 0], onehot_q):
            for s in range(5):
                got = as_tuple(jitted(name)(jax.random.key(s), d.tokens[:, 0], q, p[:, 0]))
                np.testing.assert_array_equal(got[0], want[0], err_msg=name)
                np.testing.assert_array_equal(got[1], want[1], err_msg=name)
    # Multi-path verifiers against the longest matching path prefix.
    tau, nxt = greedy_multipath_expected(np.asarray(d.tokens), np.asarray(p))
    assert len(set(tau.tolist())) > 1
    for name in MULTI:
        for s in range(5):
            got = as_tuple(jitted(name)(jax.random.key(s), d.tokens, d.draft_probs, p))
            np.testing.assert_array_equal(got[0], tau, err_msg=name)
            np.testing.assert_array_equal(got[1], nxt, err_msg=name)


def degenerate_cases(v=6):
    """(name, draft_probs row, target_probs row) pairs that stress zeros and equalities."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(v))
    q = rng.dirichlet(np.ones(v))
    q_zero = q.copy()
    q_zero[[1, 3]] = 0
    q_zero /= q_zero.sum()
    p_zero = p.copy()
    p_zero[[0, 2]] = 0
    p_zero /= p_zero.sum()
    onehot = np.eye(v)[2]
    return [
        ("p==q", q, q),
        ("q zeros", q_zero, p),
        ("p zeros", q, p_zero),
        ("one-hot p", q, onehot),
        ("one-hot q", onehot, p),
        ("one-hot p==q", onehot, onehot),
        ("disjoint", np.eye(v)[0], np.eye(v)[1]),
    ]


@pytest.mark.parametrize("case", degenerate_cases(), ids=lambda c: c[0])
def test_degenerate_inputs_never_nan_and_emit_supported_tokens(case):
    _, q_row, p_row = case
    v = len(q_row)
    # 64 drafts of K = 3 paths of L = 4 tokens, as 4 batches of 16: the shapes (V = 6 too) of
    # test_temperature_zero_reduces_to_greedy, so both share each verifier's compilation.
    b, k, l = 16, 3, 4
    rng = np.random.default_rng(1)
    support = np.flatnonzero(q_row > 0)
    q = jnp.asarray(np.broadcast_to(q_row, (b, k, l, v)), jnp.float32)
    p = jnp.asarray(np.broadcast_to(p_row, (b, k, l + 1, v)), jnp.float32)
    for _ in range(4):
        tokens = rng.choice(support, size=(b, k, l), p=q_row[support] / q_row[support].sum())
        tokens = jnp.asarray(tokens, jnp.int32)
        for name in CHAIN + MULTI:
            for s in range(3):
                key = jax.random.key(s)
                if name in CHAIN:
                    res = jitted(name)(key, tokens[:, 0], q[:, 0], p[:, 0])
                else:
                    res = jitted(name)(key, tokens, q, p)
                tau, nxt, _ = as_tuple(res)
                assert ((tau >= 0) & (tau <= l)).all(), name
                # The emitted token always has positive target probability.
                assert (p_row[nxt] > 0).all(), (name, nxt)
                # p == q accepts everything, except for greedy (argmax matches only) and GBV:
                # with all keys p/q tied the lexicographic maximum skews towards large token
                # ids, so q_skew != p (K = 2, p = q = (1/2, 1/2): q_skew = (1/4, 3/4),
                # acceptance 3/4).
                if np.array_equal(p_row, q_row) and name not in ("greedy", "gbv"):
                    assert (tau == l).all(), name


@pytest.mark.parametrize("name", CHAIN + MULTI)
def test_num_draft_caps_acceptance(name):
    d = make_draft(9, b=32, k=2, l=4, noise=0.0)  # draft == target: everything valid is accepted
    n = jnp.asarray(np.random.default_rng(0).integers(0, 5, size=(32, 2)), jnp.int32)
    tokens = jnp.where(jnp.arange(4)[None, None] < n[..., None], d.tokens, -1)
    key = jax.random.key(3)
    if name in CHAIN:
        res = verify.get(name)(
            key, tokens[:, 0], d.draft_probs[:, 0], d.target_probs[:, 0], num_draft=n[:, 0]
        )
        tau = np.asarray(res.num_accepted)
        assert (tau <= np.asarray(n[:, 0])).all()
        if name != "greedy":  # greedy accepts only argmax matches, not every sample of q == p
            np.testing.assert_array_equal(tau, np.asarray(n[:, 0]))
    else:
        res = multipath(name)(key, tokens, d.draft_probs, d.target_probs, num_draft=n)
        tau, path = np.asarray(res.num_accepted), np.asarray(res.path)
        n_np = np.asarray(n)
        assert (tau <= n_np[np.arange(32), path]).all()
        if name != "gbv":  # p == q: the walk follows the reported path to its valid end
            np.testing.assert_array_equal(tau, n_np[np.arange(32), path])


def test_verify_imports_neither_flax_nor_models():
    code = textwrap.dedent(
        """
        import sys
        import specjax.verify, specjax.verify.reference
        bad = [m for m in sys.modules if m == 'flax' or m.startswith('flax.')
               or m.startswith('specjax.models') or m.startswith('specjax.decode')]
        assert not bad, bad
        print('clean')
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr


@pytest.mark.slow
def test_vocab_sharded_inputs_match_unsharded():
    """On 4 emulated CPU devices, vocab-sharded probabilities give the unsharded result."""
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from specjax import verify
        from specjax.verify import synthetic
        assert len(jax.devices()) == 4
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "model"))
        fam = synthetic.SyntheticFamily(vocab_size=64, seed=1)
        d = synthetic.sample_draft(jax.random.key(0), fam, 4, 3, 4)
        key = jax.random.key(5)
        for name in ["greedy", "token", "block", "specinfer", "spectr", "gbv"]:
            f = verify.get(name)
            chain = name in ("greedy", "token", "block")
            args = tuple(x[:, 0] for x in d) if chain else tuple(d)
            want = f(key, *args)
            spec = P("data", None, "model") if chain else P("data", None, None, "model")
            tok_spec = P("data", None) if chain else P("data", None, None)
            sharded = (jax.device_put(args[0], NamedSharding(mesh, tok_spec)),
                       jax.device_put(args[1], NamedSharding(mesh, spec)),
                       jax.device_put(args[2], NamedSharding(mesh, spec)))
            got = jax.jit(f)(key, *sharded)
            for a, b in zip(want, got):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
        print("sharded-ok")
        """
    )
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0 and "sharded-ok" in out.stdout, out.stderr[-3000:]


@pytest.mark.parametrize("name", CHAIN + MULTI)
def test_padding_ends_the_draft(name):
    """A -1 inside the valid length acts exactly like a shorter num_draft (bit for bit)."""
    d = make_draft(12, b=16, k=2, l=4)
    cut = jnp.asarray(np.random.default_rng(1).integers(0, 4, size=(16, 2)), jnp.int32)
    pos = jnp.arange(4)[None, None]
    padded = jnp.where(pos == cut[..., None], -1, d.tokens)  # one -1, real tokens after it
    key = jax.random.key(4)
    if name in CHAIN:
        f = verify.get(name)
        rows = (d.draft_probs[:, 0], d.target_probs[:, 0])
        got = f(key, padded[:, 0], *rows)
        want = f(key, d.tokens[:, 0], *rows, num_draft=cut[:, 0])
    else:
        f = multipath(name)
        got = f(key, padded, d.draft_probs, d.target_probs)
        want = f(key, d.tokens, d.draft_probs, d.target_probs, num_draft=cut)
    for a, b in zip(as_tuple(got), as_tuple(want), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", CHAIN + MULTI)
@pytest.mark.parametrize("bad", [11, 12, 10_000])  # V = 11: ids >= V are out of range
def test_out_of_range_draft_tokens_are_rejected_like_padding(name, bad):
    """An id >= V ends the draft exactly as -1 does: it is never accepted (it used to be
    clipped to V - 1 and accepted)."""
    d = make_draft(13, b=16, k=2, l=4)
    cut = jnp.asarray(np.random.default_rng(2).integers(0, 4, size=(16, 2)), jnp.int32)
    pos = jnp.arange(4)[None, None]
    wrong = jnp.where(pos == cut[..., None], bad, d.tokens)
    padded = jnp.where(pos == cut[..., None], -1, d.tokens)
    key = jax.random.key(5)
    if name in CHAIN:
        f = verify.get(name)
        rows = (d.draft_probs[:, 0], d.target_probs[:, 0])
        got, want = f(key, wrong[:, 0], *rows), f(key, padded[:, 0], *rows)
        assert np.all(np.asarray(got.num_accepted) <= np.asarray(cut[:, 0]))
    else:
        f = multipath(name)
        got = f(key, wrong, d.draft_probs, d.target_probs)
        want = f(key, padded, d.draft_probs, d.target_probs)
    for a, b in zip(as_tuple(got), as_tuple(want), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", CHAIN + MULTI)
def test_empty_dimensions_are_one_clear_error(name):
    key = jax.random.key(0)
    if name in CHAIN:
        f, toks = verify.get(name), jnp.zeros((0, 3), jnp.int32)
        args = (toks, jnp.zeros((0, 3, 5)), jnp.zeros((0, 4, 5)))
    else:
        f, toks = multipath(name), jnp.zeros((0, 2, 3), jnp.int32)
        args = (toks, jnp.zeros((0, 2, 3, 5)), jnp.zeros((0, 2, 4, 5)))
    with pytest.raises(ValueError, match="B = 0"):
        f(key, *args)
