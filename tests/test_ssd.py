"""Speculative speculative decoding: the fan-out, Saguaro's law, the branch tree, and lossless
decoding (greedy equality in every regime and backup; the sequence law at temperature 1)."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import sampling, verify
from specjax.decode import DecodeConfig, generate
from specjax.decode.ssd import generate_ssd, ssd_rates
from specjax.decode.ssd.drafter import SSDConfig, SSDDrafter
from specjax.decode.ssd.fanout import branch_layout, geometric_fan_out, parse_fan_out
from specjax.models import Decoder
from specjax.models.pure import PureModel
from specjax.testing import pair, sharpened, tiny_config
from tests import test_decode_lossless as lossless

GREEDY = sampling.SamplingParams(0.0)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]


def test_geometric_fan_out_sums_caps_and_decays():
    fan = geometric_fan_out(24, 7, alpha=0.8)
    assert sum(fan) == 24 and len(fan) == 8
    assert all(a >= b for a, b in itertools.pairwise(fan[:-1]))  # geometric in k < L
    assert geometric_fan_out(15, 4, alpha=0.9, cap=3) == (3, 3, 3, 3, 3)
    assert max(geometric_fan_out(12, 4, alpha=0.5, cap=4)) <= 4
    with pytest.raises(ValueError, match="exceeds"):
        geometric_fan_out(16, 4, cap=3)
    k_of, rank = branch_layout((2, 0, 1))
    assert k_of.tolist() == [0, 0, 2] and rank.tolist() == [0, 1, 0]
    assert parse_fan_out("uniform", 4, 10, 0.8) == (2,) * 5
    with pytest.raises(ValueError, match="L \\+ 1 = 5"):
        parse_fan_out("1,2", 4, 3, 0.8)


def test_saguaro_law():
    q = jnp.asarray([[0.5, 0.3, 0.15, 0.05], [0.0, 1.0, 0.0, 0.0]])
    out = np.asarray(sampling.saguaro(q, 2, 0.5))
    want = np.asarray([0.25, 0.15, 0.15, 0.05]) / 0.6
    np.testing.assert_allclose(out[0], want, rtol=1e-6)
    np.testing.assert_array_equal(out[1], [0, 1, 0, 0])  # one-hot rows are unchanged
    assert sampling.saguaro(q, 2, 1.0) is q


@pytest.mark.slow  # ~9 s: default-tier time (SSD's greedy equality stays)
def test_branches_equal_contiguous_draft_runs():
    """Every branch (k, b) is the draft's own continuation of prefix + x_1..x_k + b: its laws
    match a cache-free forward of that sequence (positions and tree masks are right)."""
    _, draft = pair(vocab=48, sigma=0.1)
    params = sampling.SamplingParams(1.0)
    ssd = SSDConfig(fan_out=(2, 1, 1, 2), saguaro=1.0)
    drafter = SSDDrafter(draft, ssd=ssd, sampling=params)
    prompts = jnp.asarray([[5, 6, 7, 8, 9, 10], [11, 12, 0, 0, 0, 0]])
    lengths = jnp.asarray([6, 2])
    init = jax.jit(drafter.init, static_argnums=(3, 4))
    state, outcome = init(prompts, lengths, jax.random.key(3), 64, 64)
    served, state = jax.jit(drafter.serve)(state, outcome)
    state = jax.jit(drafter.build)(state)
    cache = jax.device_get(state.cache)
    x = np.asarray(served.tokens[:, 0])
    forward = jax.jit(lambda seq: draft(seq).logits[0])  # [T, V], no cache
    for row in range(2):
        prefix = np.asarray(prompts[row, : int(lengths[row])]).tolist()
        for c in range(ssd.branches):
            k, b = int(cache.k_of[row, c]), int(cache.bonus[row, c])
            if k < 3:
                assert b != x[row, k]  # the drafted token is never a bonus guess
            seq = prefix + x[row, :k].tolist() + [b] + cache.tokens[row, c].tolist()
            logits = forward(jnp.asarray([seq + [0] * (16 - len(seq))]))  # causal: pad freely
            start = len(prefix) + k  # position of b
            want = sampling.probs_from_logits(logits[start : start + 3], params)
            np.testing.assert_allclose(cache.probs[row, c], np.asarray(want), atol=1e-5)
        for k in range(4):  # candidates for one k are distinct
            bonus = cache.bonus[row][cache.k_of[row] == k]
            assert len(set(bonus.tolist())) == len(bonus)


@pytest.fixture(scope="module")
def v4_pair():
    target = sharpened(Decoder(tiny_config(4, name="t"), rngs=nnx.Rngs(10)), 1.0)
    draft = sharpened(Decoder(tiny_config(4, num_layers=1, name="d"), rngs=nnx.Rngs(11)), 1.5)
    return PureModel.of(target), PureModel.of(draft)


ALL_HIT = (3, 3, 4)  # V = 4, L = 2: every (k, b) outcome has a branch
ALL_MISS = (1, 0, 0)
MIXED = (1, 1, 1)


def check_greedy_equality(pair, fan_out, backup, verifier):
    target, draft = pair
    prompts = [[1, 2, 3, 1], [0, 3], [2, 2, 1, 0, 3, 3]]
    ar = generate(target, prompts, DecodeConfig("autoregressive", GREEDY, 16))
    drafter = SSDDrafter(draft, ssd=SSDConfig(fan_out=fan_out, backup=backup), sampling=GREEDY)
    out = generate(target, prompts, DecodeConfig(verifier, GREEDY, 16), drafter)  # SSD's loop
    assert out.ssd is not None and out.tokens == ar.tokens, (verifier, fan_out, backup)
    if fan_out == ALL_HIT:
        assert ssd_rates(out.ssd)["ssd_hit_rate"] == 1.0
    return out


@pytest.mark.parametrize(
    "fan_out,backup,verifier",
    [  # the default tier keeps all-hit and mixed; all-miss is in the slow matrix too
        (ALL_HIT, "jit", "block"),
        pytest.param(ALL_MISS, "ngram", "token", marks=pytest.mark.slow),
        (MIXED, "none", "greedy"),
    ],
)
def test_greedy_ssd_equals_autoregressive(v4_pair, fan_out, backup, verifier):
    out = check_greedy_equality(v4_pair, fan_out, backup, verifier)
    if fan_out == ALL_HIT:  # (the mixed fan-out's drafts on this pair are all rejected)
        hist = out.metrics.accepted_length_histogram
        assert hist[0] > 0 and sum(hist[1:]) > 0  # rejections and acceptances in one run


@pytest.mark.slow
@pytest.mark.parametrize("verifier", ["greedy", "token", "block"])
@pytest.mark.parametrize("backup", ["jit", "ngram", "none"])
@pytest.mark.parametrize("fan_out", [ALL_HIT, ALL_MISS, MIXED])
def test_greedy_ssd_equals_autoregressive_everywhere(v4_pair, fan_out, backup, verifier):
    check_greedy_equality(v4_pair, fan_out, backup, verifier)


@pytest.mark.slow
def test_greedy_ssd_on_a_close_pair_hits_and_accepts():
    target, draft = pair(vocab=48, sigma=0.02)
    ar = generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, 24))
    drafter = SSDDrafter(draft, ssd=SSDConfig(fan_out=(2, 2, 2, 2, 2)), sampling=GREEDY)
    out = generate_ssd(target, PROMPTS, DecodeConfig("block", GREEDY, 24), drafter)
    assert out.tokens == ar.tokens
    assert ssd_rates(out.ssd)["ssd_hit_rate"] > 0.5 and out.metrics.block_efficiency > 2.0
    assert ssd_rates(out.ssd)["ssd_served_from_cache"] > 0.5


NEW, ROWS = lossless.NEW, lossless.ROWS


def ssd_law_pvalue(pair, ssd: SSDConfig, verifier: str = "token", seed: int = 7) -> float:
    target, draft = pair
    params = sampling.SamplingParams(1.0)
    drafter = SSDDrafter(draft, ssd=ssd, sampling=params)
    cfg = DecodeConfig(verifier, params, max_new_tokens=NEW)
    out = generate_ssd(target, [lossless.PROMPT] * ROWS, cfg, drafter, seed=seed)
    assert all(len(r) == NEW for r in out.tokens)
    return lossless.chi_square_pvalue(out.tokens, lossless.exact_joint(target, params))


@pytest.mark.parametrize(
    "verifier,ssd",
    [
        pytest.param(
            "block",
            SSDConfig(fan_out=MIXED, saguaro=0.3, saguaro_top=2),
            marks=pytest.mark.slow,  # a Monte-Carlo run: the slow tier
        ),
        pytest.param(
            "block", SSDConfig(fan_out=ALL_HIT, saguaro=0.3, saguaro_top=2), marks=pytest.mark.slow
        ),
        pytest.param("token", SSDConfig(fan_out=MIXED, backup="ngram"), marks=pytest.mark.slow),
    ],
)
def test_ssd_follows_the_target_law(v4_pair, verifier, ssd):
    assert ssd_law_pvalue(v4_pair, ssd, verifier) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("verifier", ["token", "block"])
@pytest.mark.parametrize("backup", ["jit", "ngram"])
@pytest.mark.parametrize("saguaro", [1.0, 0.3])
@pytest.mark.parametrize("fan_out", [ALL_HIT, ALL_MISS])
def test_ssd_follows_the_target_law_everywhere(v4_pair, verifier, backup, saguaro, fan_out):
    ssd = SSDConfig(fan_out=fan_out, saguaro=saguaro, saguaro_top=2, backup=backup)
    assert ssd_law_pvalue(v4_pair, ssd, verifier) > 1e-3


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class UnscaledLaw(SSDDrafter):
    """Planted bug: samples from Saguaro's q' but tells the verifier the unscaled q."""

    def laws(self, logits):
        q = sampling.probs_from_logits(logits, self.sampling)
        return sampling.saguaro(q, self.ssd.top, self.ssd.saguaro), q


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PicksByContent(SSDDrafter):
    """Planted bug: serves a matching branch only if its first token is not 0 (else the JIT
    backup drafts again): the choice depends on the sampled content."""

    def lookup(self, cache, outcome):
        found, tokens, probs = super().lookup(cache, outcome)
        return found & (tokens[:, 0] != 0), tokens, probs


def argmax_matching(keys, draft_tokens, draft_probs, target_probs, num_draft=None):
    """The reference's fast-backup rule at T > 0: accept while the draft token is the target's
    argmax, then sample the next token from p (not exact)."""
    del draft_probs
    b, l_len = draft_tokens.shape
    n = jnp.full((b,), l_len) if num_draft is None else num_draft
    best = jnp.argmax(target_probs[:, :l_len], axis=-1)  # [B, L]
    ok = (draft_tokens == best) & (jnp.arange(l_len)[None] < n[:, None])
    tau = jnp.sum(jnp.cumprod(ok, axis=1), axis=1)
    p_next = jnp.take_along_axis(target_probs, tau[:, None, None], axis=1)[:, 0]
    nxt = jax.vmap(sampling.sample)(keys, p_next)  # keys [B]: verifiers take one key per row
    return verify.VerifyResult(tau.astype(jnp.int32), nxt.astype(jnp.int32), jnp.zeros_like(tau))


def planted_pvalue(pair, drafter_cls, ssd: SSDConfig) -> float:
    target, draft = pair
    params = sampling.SamplingParams(1.0)
    cfg = DecodeConfig("token", params, max_new_tokens=NEW)
    drafter = drafter_cls(draft, ssd=ssd, sampling=params)
    out = generate_ssd(target, [lossless.PROMPT] * ROWS, cfg, drafter, seed=7)
    return lossless.chi_square_pvalue(out.tokens, lossless.exact_joint(target, params))


@pytest.mark.slow
def test_the_law_test_catches_an_unscaled_law(v4_pair):
    """Drafting from Saguaro's q' but verifying with q is biased, and the test says so."""
    ssd = SSDConfig(fan_out=ALL_HIT, saguaro=0.3, saguaro_top=2)
    assert planted_pvalue(v4_pair, UnscaledLaw, ssd) < 1e-6


@pytest.mark.slow
def test_the_law_test_catches_content_dependent_serving(v4_pair):
    assert planted_pvalue(v4_pair, PicksByContent, SSDConfig(fan_out=ALL_HIT)) < 1e-6


@pytest.mark.slow
def test_the_law_test_catches_argmax_matching(v4_pair, monkeypatch):
    """The reference's fast backup at T > 0: random (here n-gram) tokens accepted by argmax
    matching, the next token sampled from p."""
    monkeypatch.setitem(verify.VERIFIERS, "token", argmax_matching)
    jax.clear_caches()  # no program traced with the real verifier is reused, nor kept after
    try:
        ssd = SSDConfig(fan_out=ALL_MISS, backup="ngram")
        assert planted_pvalue(v4_pair, SSDDrafter, ssd) < 1e-6
    finally:
        jax.clear_caches()


def test_ssd_refuses_multipath_verifiers(v4_pair):
    target, draft = v4_pair
    drafter = SSDDrafter(draft, ssd=SSDConfig(fan_out=MIXED), sampling=GREEDY)
    with pytest.raises(ValueError, match="one chain per row"):
        generate_ssd(target, PROMPTS, DecodeConfig("specinfer", GREEDY, 4), drafter)
    with pytest.raises(ValueError, match="an SSDDrafter runs on one device"):
        generate(target, PROMPTS, DecodeConfig("block", GREEDY, 4), drafter, mesh=object())
    with pytest.raises(ValueError, match="ssd_devices places an SSDDrafter"):
        generate(target, PROMPTS, DecodeConfig("block", GREEDY, 4), None, ssd_devices=(1, 2))
    with pytest.raises(ValueError, match="fan_out_miss"):
        SSDConfig(fan_out=(1, 1, 1), fan_out_miss=(1, 1))
    with pytest.raises(ValueError, match="saguaro"):
        SSDConfig(saguaro=0.0)


EIGHT = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")


def run_check(which: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tests.ssd_check", which],
        cwd=Path(__file__).resolve().parents[1],
        env=EIGHT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
    return out.stdout


@pytest.mark.slow
def test_rounds_on_two_devices_give_the_oracle_tokens():
    """Target on device 0, draft on device 1, dispatched from the host: the fused oracle's
    tokens and counters, at temperature 1 (same keys)."""
    run_check("equal_t1")


@pytest.mark.slow
def test_rounds_on_two_devices_give_the_oracle_tokens_everywhere():
    run_check("equal")


@pytest.mark.slow
def test_draft_and_target_overlap():
    """With a sleep injected into verification and into build, a round on two devices costs
    about one sleep, on a shared device about two."""
    print(run_check("overlap"))


def test_cli_mode_ssd_matches_autoregressive_and_reports_ssd_metrics(tmp_path):
    from specjax.cli import decode as runner
    from specjax.config_files import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "tiny_random.py")
    cfg.mode, cfg.temperature, cfg.verifier = "ssd", 0.0, "greedy"
    cfg.batch_size, cfg.compare_autoregressive = 2, True
    cfg.metrics_json = str(tmp_path / "m.json")
    record = runner.run(cfg, out=io.StringIO())
    assert record["greedy_matches_autoregressive"] is True
    saved = json.loads((tmp_path / "m.json").read_text())
    for key in ("ssd_hit_rate", "ssd_bonus_accuracy", "ssd_served_from_cache", "block_efficiency"):
        assert key in saved and saved[key] == record[key], key
    assert "ssd_accepted_length_from_cache" in saved
