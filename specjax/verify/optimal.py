"""Optimal multi-draft acceptance rate (Hu et al., arXiv 2502.18779): the oracle of
docs/algorithms.md, "Optimal multi-draft acceptance".

For a target ``p``, a draft ``q`` and ``n`` draft tokens drawn from ``q`` (i.i.d. with replacement,
or sequentially without replacement), the best acceptance probability any lossless single-step
verifier can reach is the dual value

    alpha* = 1 + min over H ⊆ vocab of [ p(H) - Q(all n drafts in H) ],

and the minimum is attained on one of the V + 1 prefixes of the tokens sorted by p(v)/q(v)
ascending. Shapes use the letters of :mod:`specjax.typing` (B batch, V vocabulary).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from specjax.typing import Array
from specjax.verify.common import compute_dtype

_T0 = 1e-4
"""Smallest quadrature time (clock rates are normalised to total 1); below it the integrand of
the exponential-race integral is replaced by its exact small-t form c * t."""

_TAIL = 25.0
"""The grid ends at _TAIL / r_min where every feasible integrand has decayed below ~n e^-_TAIL."""

_STEP = 0.5
"""Default quadrature step in log t for the widest possible range of the dtype (finer otherwise)."""

_LOG2 = math.log(2.0)

_CHUNK_ELEMENTS = 1 << 22
"""Upper bound on the elements of one [B, V, grid chunk, n] polynomial array (memory bound)."""


def _log_max_time(dtype: jnp.dtype) -> float:
    """Largest log t of the grid: t stays finite with a margin (float32 tops out near 3e38)."""
    return math.log(float(jnp.finfo(dtype).max)) - 1.0


def _big(dtype: jnp.dtype) -> float:
    return float(jnp.finfo(dtype).max) / 16


def _poly_mul(a: Array, b: Array) -> Array:
    """Product of polynomials in z truncated mod z^n; coefficients on the last axis ``[..., n]``.

    Coefficients are non-negative; they are capped at a huge finite value so that an overflow
    (only possible for n - 1 large against log V) never turns into inf * 0 = NaN.
    """
    n = a.shape[-1]
    coeffs = []
    for k in range(n):
        acc = a[..., 0] * b[..., k]
        for i in range(1, k + 1):
            acc = acc + a[..., i] * b[..., k - i]
        coeffs.append(acc)
    return jnp.minimum(jnp.stack(coeffs, axis=-1), _big(a.dtype))


def _running_nth_largest(x: Array, n: int) -> Array:
    """``out[b, j]`` = n-th largest of ``x[b, :j+1]`` (0 while fewer than n entries), ``[B, V]``."""
    if n == 1:
        return jax.lax.cummax(x, axis=1)
    pad = jnp.zeros((*x.shape, n - 1), x.dtype)
    elems = jnp.concatenate([x[..., None], pad], axis=-1)  # [B, V, n], sorted descending

    def merge(a: Array, b: Array) -> Array:
        return jax.lax.top_k(jnp.concatenate([a, b], axis=-1), n)[0]

    return jax.lax.associative_scan(merge, elems, axis=1)[..., n - 1]


def _not_all_in_prefix_without_replacement(q: Array, c: Array, n: int, num_points: int) -> Array:
    """Q(not all n drafts in H_j) for sequential sampling without replacement, ``[B, V]``.

    Args:
      q: draft distribution sorted by the prefix order, normalised to sum 1, ``[B, V]``.
      c: ``c[b, j] = q(vocab minus H_{j+1})`` (suffix sums, accurate when tiny), ``[B, V]``.
      n: number of drafts (>= 2).
      num_points: number of quadrature points per row.

    Returns:
      ``I[b, j] = 1 - Q(all n drafts in H_{j+1})`` for feasible prefixes (at least n tokens of
      positive q), 1 for infeasible ones, ``[B, V]``.
    """
    dtype = q.dtype
    batch, vocab = q.shape
    count = jnp.cumsum((q > 0).astype(jnp.int32), axis=1)
    feasible = count >= n
    # Slowest decay rate among feasible prefixes with c > 0: the integrand c e^{-ct} G_j(t) is at
    # most n c e^{-(c + q_(n)) t}, q_(n) = n-th largest q in the prefix.
    rate = c + _running_nth_largest(q, n)
    rate = jnp.where(feasible & (c > 0), rate, jnp.inf)
    r_min = jnp.min(rate, axis=1)  # [B]
    x_lo = math.log(_T0)
    x_hi = jnp.where(jnp.isfinite(r_min), math.log(_TAIL) - jnp.log(r_min), x_lo + 1.0)
    # Keep every grid time finite (q * t with q = 0 must stay 0, never 0 * inf).
    x_hi = jnp.clip(x_hi, x_lo + 1.0, _log_max_time(dtype))
    h = (x_hi - x_lo) / (num_points - 1)  # [B], log-time step

    chunk = max(1, min(num_points, _CHUNK_ELEMENTS // max(1, batch * vocab * n)))
    num_chunks = -(-num_points // chunk)
    idx = jnp.arange(num_chunks * chunk, dtype=dtype).reshape(num_chunks, 1, chunk)
    x = x_lo + h[None, :, None] * idx  # [num_chunks, B, chunk]
    valid = (idx < num_points).astype(dtype)  # padding points of the last chunk get weight 0
    t = jnp.exp(x)

    def body(acc: Array, tv: tuple[Array, Array]) -> tuple[Array, None]:
        t_c, valid_c = tv  # [B, chunk], [1, chunk]
        qt = q[:, :, None] * t_c[:, None, :]  # [B, V, chunk]
        # Factor e^{-qt} + (1 - e^{-qt}) z. Unfired-leaning clocks (qt <= log 2, the vast
        # majority) are written e^{-qt} (1 + w z), w = e^{qt} - 1, with the scale e^{-qt} summed
        # apart in log space: a product of thousands of rounded e^{-qt} close to 1 would lose
        # ~sqrt(V) ulps. Every coefficient is <= 1, so products stay below C(V, n - 1).
        unfired = qt <= _LOG2
        a0 = jnp.where(unfired, 1.0, jnp.exp(-qt))
        a1 = jnp.where(unfired, jnp.expm1(jnp.minimum(qt, _LOG2)), -jnp.expm1(-qt))
        zeros = jnp.zeros((*qt.shape, n - 2), dtype)
        factors = jnp.concatenate([a0[..., None], a1[..., None], zeros], axis=-1)
        prefix = jax.lax.associative_scan(_poly_mul, factors, axis=1)  # [B, V, chunk, n]
        log_scale = -jnp.cumsum(jnp.where(unfired, qt, 0.0), axis=1)
        # P(fewer than n H-clocks fired by t) = e^{log_scale} * sum of the coefficients.
        below = jnp.exp(log_scale + jnp.log(jnp.sum(prefix, axis=-1)))
        ct = c[:, :, None] * t_c[:, None, :]
        weight = ct * jnp.exp(-ct) * valid_c[:, None, :]
        return acc + jnp.sum(weight * below, axis=-1), None

    acc, _ = jax.lax.scan(body, jnp.zeros((batch, vocab), dtype), (t, valid))
    # Trapezoid rule in x = log t (exponentially accurate for this smooth, doubly decaying
    # integrand), continued below x_lo with the exact small-t form c * e^x of the integrand.
    # sum_{k>=1} f(x_lo - k h) with f = c t (1 - c t) + O(t^3), t = T0 e^{-kh}.
    hh = h[:, None]
    lower = c * _T0 / jnp.expm1(hh) - c**2 * _T0**2 / jnp.expm1(2 * hh)
    integral = h[:, None] * (acc + lower)
    return jnp.where(feasible, jnp.clip(integral, 0.0, 1.0), 1.0)


def default_num_points(dtype: jnp.dtype) -> int:
    """Quadrature points giving a log-time step <= 0.5 over the widest range ``dtype`` allows.

    The range is min(log(_TAIL / r_min), log of the largest finite time) - log(_T0) with r_min
    >= the smallest normal number: 195 points for float32, 1437 for float64.

    Args:
      dtype: the compute dtype (float32 or float64).

    Returns:
      The number of quadrature points.
    """
    tiny = float(jnp.finfo(dtype).tiny)
    widest = min(math.log(_TAIL / tiny), _log_max_time(dtype)) - math.log(_T0)
    return math.ceil(widest / _STEP) + 1


@functools.partial(jax.jit, static_argnames=("n", "replacement", "num_points"))
def _optimal_rows(p: Array, q: Array, n: int, replacement: bool, num_points: int) -> Array:
    """alpha* for rows ``p, q [B, V]`` -> ``[B]``."""
    dtype = p.dtype
    total = jnp.sum(q, axis=1, keepdims=True)
    q = jnp.where(total > 0, q / jnp.where(total > 0, total, 1), 0)
    # Subnormal draft probabilities count as 0 (flushed on some backends; keeps 1/q_min finite).
    q = jnp.where(q >= jnp.finfo(dtype).tiny, q, 0)
    # Prefix order: ratio p/q ascending, q = 0 last (ratio +inf, also for p = q = 0, never NaN).
    key = jnp.where(q > 0, p / jnp.where(q > 0, q, 1), jnp.inf)
    order = jnp.argsort(key, axis=1, stable=True)
    p = jnp.take_along_axis(p, order, axis=1)
    q = jnp.take_along_axis(q, order, axis=1)
    p_prefix = jnp.cumsum(p, axis=1)  # p(H_j), j = 1..V
    q_prefix = jnp.cumsum(q, axis=1)  # q(H_j)
    # c_j = q(vocab minus H_j) from suffix sums, exact down to tiny values.
    suffix = jnp.flip(jnp.cumsum(jnp.flip(q, 1), axis=1), 1)  # q of tokens j..V-1
    c = jnp.concatenate([suffix[:, 1:], jnp.zeros_like(suffix[:, :1])], axis=1)
    if replacement or n == 1:
        # 1 - q(H)^n, via c when q(H) is close to 1 (where q(H)^n loses digits).
        near_one = -jnp.expm1(n * jnp.log1p(-jnp.minimum(c, 0.5)))
        far = 1 - jnp.minimum(q_prefix, 1) ** n
        not_all_in = jnp.where(q_prefix > 0.5, near_one, far)
        # q = 0 everywhere (invalid input): Q(all in H) = 0 for every H.
        not_all_in = jnp.where(total > 0, not_all_in, 1)
    else:
        not_all_in = _not_all_in_prefix_without_replacement(q, c, n, num_points)
    candidates = p_prefix + not_all_in  # 1 + p(H_j) - Q(all in H_j), j = 1..V
    alpha = jnp.minimum(jnp.min(candidates, axis=1), 1.0)  # H_0 = {} gives 1
    return jnp.clip(alpha, 0.0, 1.0).astype(dtype)


def optimal_acceptance(
    target_probs: Array,
    draft_probs: Array,
    num_drafts: int,
    replacement: bool = True,
    *,
    num_points: int | None = None,
) -> Array:
    """Optimal single-step acceptance rate of ``num_drafts`` drafts (Hu et al., 2502.18779).

    The largest P(Y in drafts) over all couplings of the draft tuple with Y ~ p, i.e. the
    acceptance rate of the best possible lossless verifier for the given draft sampling, from
    the dual (docs/algorithms.md, "Optimal multi-draft acceptance")

        alpha* = 1 + min_j [ p(H_j) - Q(all n drafts in H_j) ],

    over the V + 1 prefixes H_j of the tokens sorted by p(v)/q(v) ascending (q(v) = 0 last, as
    ratio +inf, also for p = q = 0; ties in index order; any tie order gives the same minimum).
    H_0 = {} gives 1, so alpha* <= 1.

    * ``replacement=True`` (i.i.d. drafts): Q(all in H) = q(H)^n, closed form from cumulative
      sums (1 - q(H)^n through log1p of the suffix mass when q(H) is close to 1). O(V log V) per
      row, exact up to rounding.
    * ``replacement=False`` (sequential sampling without replacement, i.e. Gumbel-top-n): by
      the exponential race, with clocks E_v ~ Exp(q_v) and c = q(vocab minus H),
      ``1 - Q(all in H) = ∫_0^∞ c e^{-ct} G_H(t) dt`` with G_H(t) = P(fewer than n clocks of H
      fired by t), a Poisson-binomial lower tail. For each quadrature time t, G_H of all V
      prefixes comes from one ``jax.lax.associative_scan`` over the sorted tokens of the
      truncated generating polynomials prod_{v in H} (e^{-q_v t} + (1 - e^{-q_v t}) z) mod z^n
      (non-negative terms, no cancellation; the factors e^{-q_v t} ~ 1 are kept in log space).
      The integral is a trapezoid rule in x = log t, exponentially accurate for this smooth,
      doubly decaying integrand, on ``num_points`` row-adaptive points from t = 1e-4 (the exact
      small-t form of the integrand is added below) to 25 / r_min, r_min being the slowest decay
      rate c + q_(n) (q_(n) = n-th largest q in the prefix) of any feasible prefix. The default
      number of points keeps the step <= 0.5 in log t for every row the dtype can represent
      (:func:`default_num_points`: 195 for float32, 1437 for float64). Cost
      O(V * num_points * n^2) per row, plus O(V n log n) for r_min; the grid is processed in
      chunks to bound memory. Measured (max abs error against exact enumeration,
      ``optimal_reference``): <= 1e-11 in float64 on random rows of V <= 8, n <= 4, also with
      draft probabilities spread over 300 decades; about 1e-7 in float32 (rounding), also for
      V = 32000 and n up to 8 against the float64 result. Prefixes with fewer than n tokens of
      positive q are infeasible (Q = 0, as the formula gives); a row with n > |supp(q)| thus
      gets 1. ``n > V`` is rejected at trace time. In float32 the grid is capped at t ~ 1e37,
      so positive draft probabilities below ~1e-36 that matter are not resolved.

    Rows of ``draft_probs`` are renormalised to sum 1 (subnormal entries count as 0);
    ``target_probs`` is used as given. Computed in float32, or float64 for float64 inputs (x64
    mode), and clipped to [0, 1]; zeros in p or q, p == q and one-hot rows give no NaN. jit- and
    vmap-safe with ``num_drafts``, ``replacement`` and ``num_points`` static.

    Args:
      target_probs: target distribution p, ``[B, V]`` (or any leading dims, ``[..., V]``).
      draft_probs: draft distribution q, the same shape as ``target_probs``.
      num_drafts: number of drafts n >= 1 (static Python int).
      replacement: True for i.i.d. drafts, False for drafts sampled without replacement.
      num_points: quadrature points per row (static); ``None`` picks
        :func:`default_num_points` of the compute dtype. Only used for ``replacement=False``
        with n >= 2.

    Returns:
      alpha*, ``[B]`` (the leading dims of the inputs), in [0, 1].

    Raises:
      ValueError: if the shapes differ, ``num_drafts < 1``, ``num_points < 2``, or
        ``replacement=False`` with ``num_drafts > V``.
    """
    target_probs = jnp.asarray(target_probs)
    draft_probs = jnp.asarray(draft_probs)
    if target_probs.shape != draft_probs.shape or target_probs.ndim < 1:
        raise ValueError(
            "optimal_acceptance: target_probs and draft_probs must have the same shape [B, V], got "
            f"target_probs {tuple(target_probs.shape)} and draft_probs {tuple(draft_probs.shape)}."
        )
    n = int(num_drafts)
    if n != num_drafts or n < 1:
        raise ValueError(
            f"optimal_acceptance: num_drafts must be an integer >= 1, got {num_drafts}."
        )
    *lead, vocab = target_probs.shape
    if not replacement and n > vocab:
        raise ValueError(
            f"optimal_acceptance: {n} drafts without replacement need at least {n} tokens of "
            f"positive draft probability, but the vocabulary has only V = {vocab}."
        )
    dtype = compute_dtype(target_probs, draft_probs)
    if num_points is None:
        num_points = default_num_points(dtype)
    if num_points < 2:
        raise ValueError(f"optimal_acceptance: num_points must be >= 2, got {num_points}.")
    rows = int(np.prod(lead)) if lead else 1
    p = target_probs.astype(dtype).reshape(rows, vocab)
    q = draft_probs.astype(dtype).reshape(rows, vocab)
    alpha = _optimal_rows(p, q, n=n, replacement=bool(replacement), num_points=int(num_points))
    return alpha.reshape(tuple(lead))
