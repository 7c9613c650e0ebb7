"""Training a feature draft head (:mod:`specjax.models.eagle`) on the target's own data
(:mod:`specjax.train.feature_data`) with the project's optax
:class:`~specjax.train.trainer.Trainer`.

Two recipes share the code:

* ``eagle3``: reads the target's blocks ``(1, N/2 - 1, N - 4)``; training-time test over
  ``ttt_steps`` = 3 steps (step j feeds the head's own output of step j - 1 and sees its own
  keys, as drafting j tokens ahead does), losses weighted 0.8^j.
* ``eagle1``: reads the last block only, one step (no training-time test).

The loss is the soft cross-entropy (forward KL up to a constant) between the target's law at
temperature 1 restricted and renormalised to the draft vocabulary, recomputed from the stored
last-block features, and the head's law; positions in the prompt, past the end of a
conversation, or whose next data token lies outside the draft vocabulary are masked.

Letters (:mod:`specjax.typing`): A feature layers read (A' stored), W draft vocabulary,
J training-time-test steps, Z stored tokens.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.decoder import softcap
from specjax.models.eagle import EagleConfig, EagleHead, Frozen, rms
from specjax.train.feature_data import eagle3_layers

RECIPES = ("eagle3", "eagle1")


@dataclasses.dataclass(frozen=True)
class HeadRecipe:
    """What a head reads and how it is trained.

    Attributes:
      name: ``eagle3`` or ``eagle1``.
      ttt_steps: J, training-time-test steps (1: none).
      step_weight: loss weight ratio between consecutive steps.
    """

    name: str = "eagle3"
    ttt_steps: int = 3
    step_weight: float = 0.8

    def __post_init__(self):
        if self.name not in RECIPES:
            raise ValueError(f"unknown recipe {self.name!r}; choose one of {RECIPES}")
        if self.ttt_steps < 1:
            raise ValueError(f"ttt_steps must be >= 1, got {self.ttt_steps}")

    def feature_layers(self, num_layers: int) -> tuple[int, ...]:
        """The target blocks this recipe reads."""
        return eagle3_layers(num_layers) if self.name == "eagle3" else (num_layers - 1,)


def draft_vocab(tokens: np.ndarray, mask: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    """The ``size`` most frequent ids among ``tokens[mask]`` (sorted by id) and their coverage
    (the fraction of masked tokens they include)."""
    counts = np.bincount(tokens[mask])
    top = np.argsort(-counts, kind="stable")[:size]
    coverage = float(counts[top].sum() / max(counts.sum(), 1))
    if len(top) < size:  # fewer distinct ids than asked: fill with unseen ids
        rest = np.setdiff1d(np.arange(size * 2 + len(counts)), top)[: size - len(top)]
        top = np.concatenate([top, rest])
    return np.sort(top).astype(np.int32), coverage


def response_mask(data: dict) -> np.ndarray:
    """bool ``[Z]``: tokens of the target's responses (not the prompts)."""
    z = len(data["tokens"])
    mask = np.zeros(z, bool)
    for r, start in enumerate(data["offsets"][:-1]):
        mask[start + data["prompt_lengths"][r] : data["offsets"][r + 1]] = True
    return mask


class Windows:
    """Training windows over a ragged data set, gathered on the device.

    Window (r, s) covers positions ``s .. s + T - 1`` of conversation r. A batch holds, per
    window: ``feats_in [B, T, A, D]`` (the target features of positions t - 1, zero at t = 0),
    ``tokens [B, T + J]`` (x_t .. x_{t + T + J - 1}), ``last [B, T + J, D]`` (the last-block
    features of the same positions: the target's law) and ``mask [B, T + J]`` (position u is
    trained iff x_{u+1} exists, is in the response and in the draft vocabulary), and
    ``eval_mask`` (the same without the draft-vocabulary test: what evaluation counts).

    The data's tokens and features (float16 ``[Z, A', D]``, A' the stored layers: 4.6 KB a
    token for SmolLM2) are copied to the device once; a batch sends only the windows' places
    and is gathered there. Gathering them with NumPy on the host took ~90 ms a step on an H100
    host, with the GPU ~8% busy; gathered here, the H200 heads trained at ~660k tok/s
    (benchmarks/history/, "A larger data size on a lent H200").
    """

    def __init__(self, data: dict, layer_index: list[int], d2t: np.ndarray, seq_len: int, ttt: int):
        self.index, self.t, self.j = tuple(int(i) for i in layer_index), seq_len, ttt
        in_vocab = np.zeros(int(max(d2t.max(), data["tokens"].max())) + 1, bool)
        in_vocab[d2t] = True
        starts, ends = data["offsets"][:-1], data["offsets"][1:]
        self.rows = [
            (int(a), int(b), int(p))
            for a, b, p in zip(starts, ends, data["prompt_lengths"], strict=True)
            if b - a - p >= 2
        ]
        if not self.rows:
            raise ValueError("no conversation has a response of 2 tokens or more")
        self.arrays = tuple(
            jnp.asarray(x) for x in (data["features"], data["tokens"].astype(np.int32), in_vocab)
        )

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` random windows ``(rows [B], starts [B])``: a random conversation each,
        starting at most T/2 before its response and before its last two tokens."""
        rows = rng.integers(len(self.rows), size=size)
        starts = []
        for r in rows:
            a, b, p = self.rows[r]
            lo = max(0, p - self.t // 2)
            starts.append(int(rng.integers(lo, max(lo + 1, b - a - 2))))
        return rows, np.asarray(starts, np.int64)

    def take(self, rows: np.ndarray, starts: np.ndarray) -> dict[str, jax.Array]:
        """The batch of windows ``(rows[i], starts[i])``, on the device."""
        a, b, p = np.asarray([self.rows[r] for r in rows], np.int32).T
        return gather_windows(
            *self.arrays, a, b - a, p, np.asarray(starts, np.int32),
            t=self.t, j=self.j, index=self.index,
        )  # fmt: skip

    def batch(self, rng: np.random.Generator, size: int) -> dict[str, jax.Array]:
        """``size`` random windows (:meth:`draw`), on the device."""
        return self.take(*self.draw(rng, size))


@functools.partial(jax.jit, static_argnames=("t", "j", "index"))
def gather_windows(features, tokens, in_vocab, a, n, p, starts, *, t, j, index):
    """The arrays of :class:`Windows` for windows starting at ``starts [B]`` of conversations
    ``tokens[a : a + n]`` (prompt length ``p``; each ``[B]``); ``features [Z, A', D]``."""
    pos = starts[:, None] + jnp.arange(t + j)  # [B, T + J]
    n, p = n[:, None], p[:, None]
    ok = pos < n
    idx = a[:, None] + jnp.minimum(pos, n - 1)
    prev = a[:, None] + jnp.clip(pos[:, :t] - 1, 0, n - 1)  # [B, T]
    feats_in = features[prev][:, :, jnp.asarray(index)].astype(jnp.float32)  # [B, T, A, D]
    blank = (pos[:, :t] == 0) | ~ok[:, :t]
    nxt = tokens[a[:, None] + jnp.minimum(pos + 1, n - 1)]
    scored = ok & (pos + 1 < n) & (pos + 1 >= p)
    return {
        "feats_in": jnp.where(blank[:, :, None, None], 0.0, feats_in),
        "tokens": jnp.where(ok, tokens[idx], 0),
        "last": features[idx, -1].astype(jnp.float32),
        "mask": scored & in_vocab[nxt],
        "eval_mask": scored,
        "first": pos[:, :t] == 0,  # a conversation's first pair: hidden, as in drafting
    }


def attach_target(head: EagleHead, target_module) -> EagleHead:
    """Gives the head (frozen) what training needs of the target: its final norm (its effective
    scale: ``1 + w`` for Gemma's), output rows of the draft vocabulary and final soft-cap, to
    recompute the target's law from the last-block features."""
    scale = jnp.asarray(target_module.norm.scale[...], jnp.float32)
    plus_one = target_module.config.norm_plus_one
    head.target_norm = Frozen(1.0 + scale if plus_one else scale)
    head.target_softcap = target_module.config.final_softcap  # static: None or a float
    out = target_module.embed[...] if target_module.config.tie_embeddings else None
    rows = out if out is not None else target_module.lm_head[...].T
    head.target_rows = Frozen(jnp.asarray(rows, jnp.float32)[head.d2t[...]])  # [W, D]
    return head


def ttt_loss(head: EagleHead, batch: dict, ttt: int, weight: float):
    """The weighted soft cross-entropy of ``ttt`` training-time-test steps, and metrics
    (``top1``: step-0 agreement of the head's and the target's argmax over the draft vocab)."""
    c = head.config
    t = batch["feats_in"].shape[1]
    g = head.fuse(batch["feats_in"])  # [B, T, D]
    p_logits = rms(batch["last"], c.norm_eps, head.target_norm[...]) @ head.target_rows[...].T
    p_logits = softcap(p_logits, head.target_softcap)
    keys, values, total, norm = [], [], 0.0, 0.0
    metrics = {}
    for j in range(ttt):
        tokens = batch["tokens"][:, j : j + t]
        positions = jnp.broadcast_to(jnp.arange(t)[None] + j, tokens.shape)
        q, k, v = head.qkv(g, tokens, positions)
        keys.append(k)
        values.append(v)
        h, logits = head.finish(g, head.ttt_attention(q, keys, values, batch.get("first")))
        p = jax.nn.softmax(p_logits[:, j : j + t], axis=-1)  # [B, T, W]
        ce = -jnp.sum(p * jax.nn.log_softmax(logits, axis=-1), axis=-1)  # [B, T]
        m = batch["mask"][:, j : j + t].astype(jnp.float32)
        total += weight**j * jnp.sum(ce * m) / jnp.maximum(jnp.sum(m), 1.0)
        norm += weight**j
        agree = jnp.argmax(logits, -1) == jnp.argmax(p_logits[:, j : j + t], -1)
        metrics[f"top1_{j}"] = jnp.sum(agree * m) / jnp.maximum(jnp.sum(m), 1.0)
        g = h
    return total / norm, metrics


def evaluate_head(head: EagleHead, target_module, windows: Windows, batches: list[dict]) -> dict:
    """Held-out step-0 figures against the target's full law at temperature 1:
    ``agreement`` (the head's greedy token == the target's greedy token over all V ids),
    ``overlap`` (mean Σ min(p, q), the acceptance rate of one token drafted at temperature 1), and
    the tokens counted. Masks only prompt and end positions (not the draft vocabulary)."""
    d2t = head.d2t[...]

    @jax.jit
    def score(head, feats_in, tokens, last, first):
        t = feats_in.shape[1]
        g = head.fuse(feats_in)
        q, k, v = head.qkv(g, tokens[:, :t], jnp.broadcast_to(jnp.arange(t), tokens[:, :t].shape))
        _, logits = head.finish(g, head.ttt_attention(q, [k], [v], first))
        p = jax.nn.softmax(target_module.logits(last[:, :t]))  # its norm, head and soft-cap
        q_w = jax.nn.softmax(logits, axis=-1)
        overlap = jnp.sum(jnp.minimum(p[..., d2t], q_w), axis=-1)
        agree = d2t[jnp.argmax(logits, -1)] == jnp.argmax(p, -1)
        return agree, overlap

    agree_sum = overlap_sum = count = 0.0
    for b in batches:
        t = b["feats_in"].shape[1]
        agree, overlap = score(head, b["feats_in"], b["tokens"], b["last"], b["first"])
        m = np.asarray(b["eval_mask"][:, :t], np.float64)
        agree_sum += float(np.sum(np.asarray(agree) * m))
        overlap_sum += float(np.sum(np.asarray(overlap) * m))
        count += float(m.sum())
    return {
        "agreement": agree_sum / max(count, 1),
        "overlap": overlap_sum / max(count, 1),
        "tokens": int(count),
    }


def eval_batches(windows: Windows, size: int, count: int, seed: int = 1) -> list[dict]:
    """``count`` fixed batches of ``size`` windows (the same for every call with ``seed``)."""
    rng = np.random.default_rng(seed)
    return [windows.batch(rng, size) for _ in range(count)]


def feature_scale(data: dict, layer_index: list[int], sample: int = 20_000, seed: int = 0):
    """Per-dimension root mean square ``[A, D]`` of the stored features of the layers
    ``layer_index`` over (a sample of) the data's tokens: the scale a head divides them by. A
    scale alone folds into ``fc`` exactly, so the head exports to the published layouts, which
    have no ``fc`` bias to hold a shift (:func:`specjax.models.eagle_formats.export_head`)."""
    rng = np.random.default_rng(seed)
    z = len(data["tokens"])
    rows = np.sort(rng.choice(z, size=min(sample, z), replace=False))
    x = data["features"][rows][:, layer_index].astype(np.float64)  # [n, A, D]
    return np.maximum(np.sqrt(np.mean(x * x, axis=0)), 1e-3).astype(np.float32)


def new_head(
    target_module, recipe: HeadRecipe, d2t: np.ndarray, scale=None, seed: int = 0
) -> EagleHead:
    """A fresh head for ``target_module`` reading the recipe's layers; its output rows start
    from the target's rows of the draft vocabulary; ``scale``: the features' per-dimension
    scale ``[A, D]`` (:func:`feature_scale`) it divides them by."""
    c = target_module.config
    config = EagleConfig.for_target(c, recipe.feature_layers(c.num_layers), len(d2t))
    embed = target_module.embed[...]
    rows = embed if c.tie_embeddings else target_module.lm_head[...].T
    head = EagleHead.create(config, embed, d2t, seed=seed, head_rows=np.asarray(rows)[d2t])
    if scale is not None:
        head.feature_scale = Frozen(jnp.asarray(scale, jnp.float32))
    return head


def without_shift(head: EagleHead) -> EagleHead:
    """``head`` with its feature shift dropped (heads standardised before scale alone): its
    drafts change until it is fine-tuned, and it then exports to the published layouts."""
    head.feature_shift = Frozen(jnp.zeros_like(head.feature_shift[...]))
    return head
