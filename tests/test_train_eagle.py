"""Training a feature draft head: data shards from the target's own responses (features equal to a
teacher-forced forward), the draft vocabulary, training windows and their masks, the trainer
lowering the loss and resuming, and (slow tier) the committed SmolLM2 head decoding exactly."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.decode import DecodeConfig, generate
from specjax.drafters.feature import FeatureDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams
from specjax.testing import sharpened, tiny_config
from specjax.train import eagle, feature_data
from specjax.train.trainer import TrainConfig, Trainer

HEAD = Path(__file__).resolve().parents[1] / "checkpoints" / "smollm2_eagle"


class ChatStub:
    """A tokenizer with a chat template: one id per character (mod 40) after a 2-id header."""

    eos_id = 1
    stop_ids = (1,)

    def apply_chat_template(self, messages):
        return "#" + messages[0]["content"]

    def encode(self, text, add_special_tokens=True):
        return [2, 3] + [4 + ord(ch) % 40 for ch in text[1:]]

    def encode_chat(self, messages):
        return self.encode(self.apply_chat_template(messages), add_special_tokens=False)


@pytest.fixture(scope="module")
def target():
    cfg = tiny_config(48, num_layers=4, name="t")
    return PureModel.of(sharpened(Decoder(cfg, rngs=nnx.Rngs(0)), 3.0))


@pytest.fixture(scope="module")
def shard(target, tmp_path_factory):
    texts = ["hello there", "why is the sky blue", "abc", "tell me a story about a cat"]
    arrays = feature_data.make_shard(
        target, ChatStub(), texts, temperature=1.0, max_new_tokens=12, seed=0
    )
    path = tmp_path_factory.mktemp("data") / "shard_0000.npz"
    feature_data.save_shard(path, arrays)
    return feature_data.load_shards([path, path])  # twice: offsets of concatenated shards


def test_shards_hold_the_targets_features(target, shard):
    assert list(shard["layers"]) == [1, 1, 0, 3]  # eagle3_layers(4) and the last block
    offsets = shard["offsets"]
    assert len(offsets) == 9 and offsets[-1] == len(shard["tokens"])
    for r in (0, 5):
        row = shard["tokens"][offsets[r] : offsets[r + 1]]
        hidden = target(jnp.asarray(row[None]), features=(1, 1, 0, 3)).features
        stored = shard["features"][offsets[r] : offsets[r + 1]]
        np.testing.assert_allclose(stored, hidden[0], atol=2e-3, rtol=2e-3)  # float16
        assert shard["prompt_lengths"][r] < len(row)


def test_teacher_forced_shards_score_given_answers(target, tmp_path):
    convs = [("hi", "a long enough answer here"), ("x", "short"), ("why", "because it is so, yes")]
    paths = feature_data.make_shards(
        tmp_path, target, ChatStub(), convs, [0], prompts_per_shard=3, teacher_forced=True,
        log=lambda s: None,
    )  # fmt: skip
    assert [p.name for p in paths] == ["tf_0000.npz"]
    data = feature_data.load_shards(paths)
    assert len(data["offsets"]) == 3  # "short" has fewer than 8 answer tokens
    row = data["tokens"][: data["offsets"][1]]
    want = ChatStub().encode("#hi") + ChatStub().encode("a long enough answer here") + [1]
    assert list(row) == want
    hidden = target(jnp.asarray(row[None]), features=(1, 1, 0, 3)).features
    np.testing.assert_allclose(data["features"][: len(row)], hidden[0], atol=2e-3, rtol=2e-3)


def test_shards_past_the_prompts_answer_them_again_sampled_never_the_held_out_ones(
    target, tmp_path
):
    # 10 prompts in shards of 4: chunks 0-2 (the last holds 2); shard 0 held out
    plans = [feature_data.shard_plan(i, 10, 4) for i in range(7)]
    assert [(p.start, p.stop) for p, _ in plans] == [(0, 4), (4, 8), (8, 12), (0, 4), (4, 8),
                                                     (8, 12), (0, 4)]  # fmt: skip
    assert [t for _, t in plans] == [0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    ids = feature_data.training_shards(1, 5, 10, 4)
    assert ids == [1, 2, 4, 5, 7]  # 3 and 6 would answer the held-out prompts 0-3
    with pytest.raises(ValueError, match="hold out fewer"):
        feature_data.training_shards(3, 1, 10, 4)
    texts = ["hello there", "why is the sky blue", "abc"]
    paths = feature_data.make_shards(
        tmp_path, target, ChatStub(), texts, [0, 2], prompts_per_shard=2, max_new_tokens=6,
        log=lambda s: None,
    )  # fmt: skip
    first, again = (dict(np.load(p)) for p in paths)
    assert float(first["temperature"]) == 0.0 and float(again["temperature"]) == 1.0
    cut = lambda d, r: d["tokens"][d["offsets"][r] : d["offsets"][r] + d["prompt_lengths"][r]]
    for r in range(2):  # the same prompts (chunk 0), answered again
        np.testing.assert_array_equal(cut(first, r), cut(again, r))


def test_draft_vocab_and_windows(shard):
    mask = eagle.response_mask(shard)
    d2t, coverage = eagle.draft_vocab(shard["tokens"], mask, 8)
    assert len(d2t) == 8 and np.all(np.diff(d2t) > 0) and 0 < coverage <= 1
    counts = np.bincount(shard["tokens"][mask], minlength=64)
    assert counts[d2t].min() >= np.sort(counts)[-8]  # the 8 most frequent ids
    windows = eagle.Windows(shard, [0, 1, 2], d2t, seq_len=16, ttt=3)
    a, b, p = windows.rows[0]
    w = {k: np.asarray(v[0]) for k, v in windows.take([0], [0]).items()}
    assert w["feats_in"].shape == (16, 3, shard["features"].shape[-1])
    np.testing.assert_array_equal(w["feats_in"][0], 0.0)  # no feature before position 0
    np.testing.assert_array_equal(w["feats_in"][3], shard["features"][a + 2, :3])
    n = b - a
    for u in range(16 + 2):  # trained: a next token exists, in the response and in the vocab
        nxt_ok = u + 1 < n and u + 1 >= p
        assert w["eval_mask"][u] == nxt_ok
        assert w["mask"][u] == (nxt_ok and shard["tokens"][a + u + 1] in d2t)


def numpy_window(data, index, in_vocab, row, t, j):
    """One window of :class:`eagle.Windows`, gathered on the host (the reference)."""
    (a, b, p), start = row
    n = b - a
    pos = start + np.arange(t + j)
    ok = pos < n
    idx = a + np.minimum(pos, n - 1)
    feats_in = data["features"][a + np.clip(pos[:t] - 1, 0, n - 1)][:, index].astype(np.float32)
    feats_in[(pos[:t] == 0) | ~ok[:t]] = 0.0
    scored = ok & (pos + 1 < n) & (pos + 1 >= p)
    return {
        "feats_in": feats_in,
        "tokens": np.where(ok, data["tokens"][idx], 0),
        "last": data["features"][idx, -1].astype(np.float32),
        "mask": scored & in_vocab[data["tokens"][a + np.minimum(pos + 1, n - 1)]],
        "eval_mask": scored,
    }


def test_windows_gathered_on_the_device_equal_numpy_windows(shard):
    d2t = np.arange(0, 64, 3, dtype=np.int32)
    in_vocab = np.isin(np.arange(64), d2t)
    windows = eagle.Windows(shard, [0, 2], d2t, seq_len=16, ttt=3)
    rows, starts = windows.draw(np.random.default_rng(0), 6)
    rows = np.concatenate([rows, [0, len(windows.rows) - 1]])  # and the last positions of both
    ends = [
        windows.rows[0][1] - windows.rows[0][0] - 2,
        windows.rows[-1][1] - windows.rows[-1][0] - 2,
    ]
    starts = np.concatenate([starts, ends])
    got = windows.take(rows, starts)
    for i, (r, s) in enumerate(zip(rows, starts, strict=True)):
        want = numpy_window(shard, [0, 2], in_vocab, (windows.rows[r], s), 16, 3)
        for key, value in want.items():
            np.testing.assert_array_equal(np.asarray(got[key][i]), value, err_msg=key)


@pytest.mark.slow
def test_training_lowers_the_loss_and_resumes(target, shard, tmp_path):
    mask = eagle.response_mask(shard)
    d2t, _ = eagle.draft_vocab(shard["tokens"], mask, 24)
    recipe = eagle.HeadRecipe("eagle3", ttt_steps=2)
    head = eagle.attach_target(eagle.new_head(target.module, recipe, d2t), target.module)
    windows = eagle.Windows(shard, [0, 1, 2], d2t, seq_len=16, ttt=2)
    batches = eagle.eval_batches(windows, 4, 2)
    cfg = TrainConfig(steps=40, batch_size=4, seq_len=16, learning_rate=3e-3, warmup_steps=2,
                      eval_every=20, log_every=20, checkpoint_every=20)  # fmt: skip
    loss = lambda m, b: eagle.ttt_loss(m, b, 2, 0.8)
    lines = []
    trainer = Trainer(head, cfg, tmp_path, loss_fn=loss, log=lines.append)
    before = trainer.evaluate(batches)
    trainer.fit_batches(lambda s: batches[s % 2], batches, 64)
    after = trainer.evaluate(batches)
    assert after < 0.8 * before
    assert any("tok/s" in line and "top1_0" in line for line in lines)
    again = Trainer(head, cfg, tmp_path, loss_fn=loss, log=lines.append)
    assert again.restore_latest() == 40
    assert again.evaluate(batches) == pytest.approx(after, rel=1e-6)
    figures = eagle.evaluate_head(head, target.module, windows, batches)
    assert 0 <= figures["agreement"] <= 1 and 0 < figures["overlap"] <= 1


@pytest.mark.slow
def test_committed_smollm2_head_greedy_equals_autoregressive():
    from specjax.models import fetch_smollm2, load_pretrained
    from specjax.models.eagle_formats import load_head

    pre = load_pretrained(fetch_smollm2())
    target, tok = PureModel.of(pre.model), pre.tokenizer
    head = load_head(HEAD, pre.model)
    chat = lambda t: tok.encode(tok.apply_chat_template([{"role": "user", "content": t}]))
    prompts = [chat("Why is the sky blue?"), chat("Write a haiku about autumn leaves.")]
    greedy = SamplingParams(temperature=0.0)
    ar = generate(target, prompts, DecodeConfig("autoregressive", greedy, 48)).tokens
    for verifier, k in (("block", 1), ("gbv", 3)):
        drafter = FeatureDrafter(head, num_paths=k, draft_len=4, sampling=greedy)
        out = generate(target, prompts, DecodeConfig(verifier, greedy, 48), drafter)
        assert out.tokens == ar
        assert out.metrics.block_efficiency > 1.1  # the head really drafts
