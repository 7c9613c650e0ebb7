"""Run as ``python -m tests.family_mesh_check FAMILY...`` with 4 emulated CPU devices
(``tests/test_family_mesh.py``): each family's fixture loaded straight onto a 2 x 2 (data,
model) mesh, slice by slice, decodes transformers' greedy tokens, autoregressively and with a
tensor-parallel self-draft tree, as on one device. Prints ``FAMILY-ok`` per family."""

from __future__ import annotations

import sys

import jax
import numpy as np
from flax import nnx

from specjax import sharding
from specjax.decode import AUTOREGRESSIVE, DecodeConfig, generate
from specjax.drafters import ModelDrafter
from specjax.models import load_model, load_pretrained, truncated
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams
from tests.family_fixtures import directory, reference

GREEDY = SamplingParams(temperature=0.0)


def main(families: list[str]) -> None:
    assert len(jax.devices()) == 4, jax.devices()
    mesh = sharding.make_mesh("2,2")
    for family in families:
        ref = reference(family)
        module, _ = load_model(str(directory(family)), mesh=mesh, role="target")
        wq = module.layers[0].attn.wq[...]  # [D, H, E]: query heads over model
        d, h, e = wq.shape
        assert set(sharding.shard_shapes(wq)) == {(d, h // 2, e)}, sharding.shard_shapes(wq)
        single = nnx.to_pure_dict(nnx.state(load_pretrained(directory(family)).model))
        for a, b in zip(
            jax.tree.leaves(nnx.to_pure_dict(nnx.state(module))),
            jax.tree.leaves(single),
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the slices read right
        target = PureModel.of(module)
        ar = generate(target, ref["prompts"], DecodeConfig(AUTOREGRESSIVE, GREEDY, 32), mesh=mesh)
        assert ar.tokens == ref["greedy"], (family, ar.tokens)
        layers = min(2, module.config.num_layers - 1)
        draft = ModelDrafter(truncated(module, layers), num_paths=3, draft_len=3, sampling=GREEDY)
        sd = generate(
            target, ref["prompts"], DecodeConfig("specinfer", GREEDY, 32), draft, mesh=mesh
        )
        assert sd.tokens == ref["greedy"], (family, sd.tokens)
        assert sd.metrics.accepted_tokens > 0
        print(f"{family}-ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
