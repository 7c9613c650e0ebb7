"""No loops inside a decode step (docs/architecture.md, "No loops inside a step"), read from the
compiled programs as ``tests/test_attention.py`` reads their masks.

On GPU, XLA runs every ``while`` outside its CUDA graphs: a data-dependent one copies its
predicate to the host and waits at every iteration, a counted one has its body launched from the
host. So the decode program has one ``while``, the decode loop (with adaptive widths, the loops
that nest per width), and none inside a step: the window index is a sum of comparisons (a
``searchsorted`` is a loop), the draft chains and the verifiers' depths and siblings are
unrolled, and the model drafter catches up in one bounded feed where it cannot be far behind.

What stays a loop, by design:

* XLA:CPU's threefry: JAX lowers the five key-mixing rounds as a loop on the CPU only (unrolled
  for CUDA and ROCm); :func:`loops` leaves them out.
* the model drafter's tree depths (K > 1; a chain is unrolled): unrolled, XLA copied the whole
  draft KV cache four times per step (tests/test_cache_slots.py).
* the model drafter's long catch-up, only with 0 among the widths (a lazily read prompt, a run of
  width-0 steps): two or three loops in each drafting width's step, one per chunk size
  (:meth:`ModelDrafter.catch_up`).
* SpecTr's rho* (:func:`~specjax.verify.spectr.spectr_rho`): a few Newton passes over V until
  its bracket closes (5-6, at most 40); unrolled, every step would pay all 40. One per depth.
* the verifiers' row chunks on the CPU (``lax.map``, :mod:`specjax.verify.rows`), not taken on
  other platforms; and not here, where the batch fits one chunk.
* :func:`~specjax.verify.optimal_acceptance`'s scan over chunks of quadrature points: an
  oracle, in no decode step.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verify
from specjax.decode import DecodeConfig
from specjax.decode.seams import (
    PROGRAMS,
    compile_generation,
    decode_program,
    prefill_program,
    prepare,
)
from specjax.drafters import ModelDrafter
from specjax.drafters.feature import FeatureDrafter
from specjax.models import KVCache, attention_windows
from specjax.sampling import SamplingParams
from specjax.testing import pair
from tests.test_feature_drafter import random_head

GREEDY, SAMPLED = SamplingParams(0.0), SamplingParams(1.0)
PROMPTS = [[1, 2, 3], [5, 6]]
L = 3


def loops(text: str) -> list[str]:
    """The ``while`` instructions of a compiled program's text, less XLA:CPU's threefry rounds
    (five counted trips carrying only the counter and uint32 words)."""
    found = []
    for line in text.splitlines():
        if " while(" not in line:
            continue
        carry = re.findall(r"\b([a-z]+\d*)\[", line.split(" while(")[0].split("=", 1)[1])
        rounds = '"known_trip_count":{"n":"5"}' in line and carry[0] == "s32"
        if not (rounds and set(carry[1:]) == {"u32"}):
            found.append(line)
    return found


@pytest.fixture(scope="module")
def models():
    """One-layer target and draft (the loops do not depend on the depth of the model)."""
    return pair(48, sigma=0.3, num_layers=1)


def decode_text(target, config: DecodeConfig, drafter=None) -> str:
    """The compiled decode program's text, through the path ``generate`` takes."""
    return compile_generation(target, PROMPTS, config, drafter)[1].as_text()


def fresh() -> None:
    """Forgets every compiled program and trace (around a change of the attention windows)."""
    PROGRAMS.clear()
    jax.clear_caches()


def model_drafter(models, k: int = 1, params: SamplingParams = GREEDY) -> ModelDrafter:
    return ModelDrafter(models[1], num_paths=k, draft_len=L, sampling=params)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_autoregressive_program_has_the_decode_loop_alone(models, params):
    text = decode_text(models[0], DecodeConfig("autoregressive", params, 24))
    assert len(loops(text)) == 1
    assert " sort(" not in text  # (a sort is no CUDA graph command; top-p sorts)


def test_greedy_chain_program_has_the_decode_loop_alone(models):
    """The greedy verifier and a model drafter's chain (unrolled, with its bounded catch-up),
    over attention windows (16 .. the capacity): one loop, no sort, and no copy of a KV cache
    (the catch-up's conditional updates the donated cache in place)."""
    config, drafter = DecodeConfig("greedy", GREEDY, 40), model_drafter(models)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention_windows, "MIN_WINDOW", 16)
        fresh()  # trace anew with these windows
        text = decode_text(models[0], config, drafter)
    fresh()  # later tests trace with the default windows
    assert text.count(" conditional(") >= 3  # the windows' switches (target and draft)
    assert len(loops(text)) == 1
    assert " sort(" not in text
    batch = prepare(models[0], drafter, PROMPTS, config)
    c = models[0].config  # the draft's caches have the same shape
    cache = (c.num_layers, batch.prompts.shape[0], batch.capacity, c.num_kv_heads, c.head_dim)
    copies = re.findall(rf"= f32\[{','.join(map(str, cache))}\]\S* copy\(", text)
    assert not copies, copies[:3]


SLOW = pytest.mark.slow  # each verifier alone: test_verifiers_have_no_loops


@pytest.mark.parametrize(
    "verifier,k,rho",  # rho: SpecTr's passes over V, one loop per depth (module docstring)
    [
        ("specinfer", 3, 0),
        pytest.param("block", 1, 0, marks=SLOW),
        pytest.param("token", 1, 0, marks=SLOW),
        pytest.param("gbv", 3, 0, marks=SLOW),
        pytest.param("spectr", 3, L, marks=SLOW),
    ],
)
def test_sampled_programs_with_a_model_drafter(models, verifier, k, rho):
    """A tree of K paths (or a chain) drawn by a model drafter and its verifier: the walk's
    depths and its siblings unrolled, the chain's depths too (a tree's draft keeps its loop)."""
    drafter = model_drafter(models, k, SAMPLED)
    text = decode_text(models[0], DecodeConfig(verifier, SAMPLED, 24), drafter)
    tree = int(k > 1)  # the model drafter's tree depths (module docstring)
    assert len(loops(text)) == 1 + rho + tree


def test_lowered_for_cuda_the_prng_has_no_loop_either(models):
    """Lowered for CUDA (no GPU needed), threefry's rounds are unrolled: the sampled chain
    program has one loop with nothing left out (what :func:`loops` leaves out is the CPU's)."""
    config = DecodeConfig("block", SAMPLED, 24)
    drafter = model_drafter(models, 1, SAMPLED)
    b = prepare(models[0], drafter, PROMPTS, config)
    sizes = dict(capacity=b.capacity, buffer=b.buffer, widths=())
    args = (models[0], drafter, b.prompts, b.lengths, b.active, np.int32(0))
    state = jax.eval_shape(functools.partial(prefill_program, **sizes), *args)
    steps = jax.ShapeDtypeStruct((), np.int32)
    decode = jax.jit(functools.partial(decode_program, config=config))
    traced = decode.trace(models[0], drafter, state, steps, steps, None)
    assert traced.lower(lowering_platforms=("cuda",)).as_text().count("stablehlo.while") == 1


def test_gumbel_program_has_the_decode_loop_alone(models):
    drafter = model_drafter(models, 1, SAMPLED)
    text = decode_text(models[0], DecodeConfig("gumbel", SAMPLED, 24), drafter)
    assert len(loops(text)) == 1


def test_block_program_with_a_feature_drafter(models):
    """An EAGLE-style head's chain, unrolled."""
    target = models[0]
    head = random_head(target, 8, layers=(-1, 0))
    drafter = FeatureDrafter(head, num_paths=1, draft_len=L, sampling=SAMPLED)
    text = decode_text(target, DecodeConfig("block", SAMPLED, 24), drafter)
    assert len(loops(text)) == 1


@pytest.mark.parametrize(
    "widths,expected",
    [
        # the decode loop; width 0's runs and the steps in each; width L; and the model
        # drafter's catch-up in width L's step (far behind after width-0 steps): chunks of 32,
        # then of L + 1 (a cache of at most 258 slots has no loop of 256)
        ((0, L), 6),
        # the decode loop and one loop per width: none in a step
        pytest.param((1, L), 3, marks=SLOW),
    ],
)
def test_adaptive_widths(models, widths, expected):
    config = DecodeConfig("block", GREEDY, 24, widths=widths, width_policy="random")
    text = decode_text(models[0], config, model_drafter(models))
    assert len(loops(text)) == expected
    assert " sort(" not in text


def test_window_index_is_comparisons():
    """A decoder forward over a cache of several windows chooses its window by a sum of
    comparisons: a switch, no loop; and the index is ``searchsorted``'s."""
    target, _ = pair(48, num_layers=2)
    cache = KVCache.init(target.config, 2, 128)
    tokens = jnp.ones((2, 3), jnp.int32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention_windows, "MIN_WINDOW", 16)
        fresh()
        forward = jax.jit(lambda m, c: m(tokens, cache=c).logits)
        text = forward.lower(target, cache).compile().as_text()
    fresh()
    assert text.count(" conditional(") == target.config.num_layers
    assert not loops(text)
    sizes = attention_windows.windows(128, 16)
    for longest in range(0, 126):
        lengths = jnp.asarray([longest, 0], jnp.int32)
        want = np.searchsorted(np.asarray(sizes[:-1]), longest + 3, side="left")
        assert int(attention_windows.window_index(lengths, 3, 128, 16)) == want


def test_verifiers_have_no_loops():
    """Every verifier alone, compiled: no loop but SpecTr's passes over V (one per depth)."""
    rng = np.random.default_rng(0)
    b, k, l, v = 2, 3, L, 40
    q = rng.dirichlet(np.full(v, 0.5), size=(b, k, l)).astype(np.float32)
    p = rng.dirichlet(np.full(v, 0.5), size=(b, k, l + 1)).astype(np.float32)
    tokens = rng.integers(0, v, size=(b, k, l)).astype(np.int32)
    key = jax.random.key(0)
    expected = {"spectr": l}
    for name, fn in verify.VERIFIERS.items():
        args = (
            (tokens, q, p)
            if name in verify.MULTIPATH_VERIFIERS
            else (tokens[:, 0], q[:, 0], p[:, 0])
        )
        text = jax.jit(fn).lower(key, *args).compile().as_text()
        assert len(loops(text)) == expected.get(name, 0), name
    noise = jnp.ones((b, l + 1, v))
    text = jax.jit(verify.gumbel_verify).lower(noise, tokens[:, 0], q[:, 0], p[:, 0]).compile()
    assert not loops(text.as_text())
