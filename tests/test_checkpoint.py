"""Orbax checkpoints: bit-identical round trips, restoring onto a sharding, atomic saves and
errors that name the path."""

from __future__ import annotations

import gc
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from specjax.models import checkpoint
from specjax.models.pretrained import build_model, load_pretrained
from specjax.models.tokenizer import ByteTokenizer
from tests.loader_fixtures import TOKENS, assert_trees_equal, tiny_config


def test_checkpoint_round_trip_is_bit_identical(tmp_path, untied):
    config, params = untied
    p16 = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), params)
    tok = ByteTokenizer(["<bos>", "<eos>"], bos="<bos>", eos="<eos>")
    for name, p in (("f32", params), ("bf16", p16)):
        checkpoint.save(tmp_path / name, p, config, tok)
        cfg2, restored, tok2 = checkpoint.restore(tmp_path / name)
        assert cfg2 == config
        assert_trees_equal(restored, jax.tree.map(jnp.asarray, p))
        assert tok2.encode("hé") == tok.encode("hé") and tok2.eos_id == tok.eos_id


def test_checkpoint_restores_onto_a_sharding(tmp_path, tied):
    config, params = tied
    path = checkpoint.save(tmp_path / "ck", build_model(config, params), config)
    mesh = Mesh(np.array(jax.devices()), ("model",))  # 1 device here; 8 under emulation
    one = NamedSharding(mesh, P())
    _, restored, tok = checkpoint.restore(path, sharding=one)
    assert tok is None
    assert all(x.sharding == one for x in jax.tree.leaves(restored))
    assert_trees_equal(restored, jax.tree.map(jnp.asarray, params))
    cols = NamedSharding(mesh, P(None, "model"))
    tree = jax.tree.map(
        lambda x: cols if x.ndim == 2 and x.shape[1] % mesh.size == 0 else one, params
    )
    _, restored, _ = checkpoint.restore(path, sharding=tree)
    assert restored["embed"].sharding == cols and restored["norm"]["scale"].sharding == one
    with pytest.raises(ValueError, match="sharding tree does not match the params"):
        checkpoint.restore(path, sharding={"embed": one})
    pre = load_pretrained(path, sharding=one)
    assert pre.model(jnp.asarray([TOKENS])).logits.shape == (1, len(TOKENS), config.vocab_size)


def test_checkpoint_save_is_atomic(tmp_path, monkeypatch, untied, tied):
    config, params = untied
    path = checkpoint.save(tmp_path / "ck", params, config)
    other_cfg, other = tied

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash mid-save")

    # Crash after the new params are written, before the manifest and the rename.
    monkeypatch.setattr(checkpoint, "write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # no temporary left behind
    cfg2, restored, _ = checkpoint.restore(path)
    assert cfg2 == config
    assert_trees_equal(restored, jax.tree.map(jnp.asarray, params))
    # Crash inside the orbax write.
    monkeypatch.setattr(checkpoint.ocp.Checkpointer, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    assert checkpoint.restore(path)[0] == config
    # An error while moving the new checkpoint in puts the old one back.
    real_rename = Path.rename

    def failing_rename(self, target):
        if ".tmp-" in self.name and Path(target) == path:
            raise OSError("simulated rename failure")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="simulated rename failure"):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    assert checkpoint.restore(path)[0] == config
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]

    # A kill between moving the old checkpoint aside and moving the new one in.
    def rename_then_die(self, target):
        real_rename(self, target)
        if ".old-" in str(target):
            raise KeyboardInterrupt("simulated kill between renames")

    monkeypatch.setattr(Path, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    with pytest.raises(
        FileNotFoundError, match=r"interrupted save left the previous one at .*\.ck\.old-"
    ):
        checkpoint.restore(path)
    left = next(tmp_path.glob(".ck.old-*"))
    assert checkpoint.restore(left)[0] == config
    # A completed save replaces the old checkpoint.
    checkpoint.save(path, other, other_cfg)
    assert checkpoint.restore(path)[0] == other_cfg


# Orbax's async restore of the deliberately corrupted files leaves a closed-event-loop callback.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_checkpoint_errors_name_the_path(tmp_path, untied):
    config, params = untied
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*nowhere.*checkpoint\.save"):
        checkpoint.restore(tmp_path / "nowhere")
    path = checkpoint.save(tmp_path / "ck", params, config)
    (path / "config.json").write_text("{ not json")
    with pytest.raises(ValueError, match=r"ck is not a complete specjax checkpoint"):
        checkpoint.restore(path)
    path = checkpoint.save(tmp_path / "ck", params, config)
    for f in (path / "params").rglob("*"):
        if f.is_file() and f.parent.name == "d":  # the OCDBT data files
            f.write_bytes(b"\0" * 7)
    with pytest.raises(ValueError, match=r"ck: the params could not be restored.*corrupt"):
        checkpoint.restore(path)
    gc.collect()  # let orbax's leftover async callback fire inside this (filtered) test
    (path / checkpoint.MANIFEST).unlink()
    with pytest.raises(ValueError, match="ck is not a complete specjax checkpoint"):
        checkpoint.restore(path)
    (tmp_path / "precious").mkdir()
    with pytest.raises(ValueError, match=r"precious exists and is not a specjax checkpoint"):
        checkpoint.save(tmp_path / "precious", params, config)
    with pytest.raises(ValueError, match=r"save\(.*bad\): params do not match the config"):
        checkpoint.save(tmp_path / "bad", params, tiny_config(num_layers=3))
