"""One way to run a generation: :func:`generate`, wherever the models are.

Three loops sit behind it, chosen by what is passed, with the same tokens for the same seed
wherever the arithmetic allows:

* one device or one mesh (``mesh``): the single-program loop (:mod:`specjax.decode.loop`), two
  compiled programs (prefill, then ``lax.while_loop`` over steps);
* a model draft on devices of its own (``draft_mesh``): four programs per step across the two
  sub-meshes (:mod:`specjax.decode.submesh`), the same keys and functions, so the same tokens;
* an :class:`~specjax.decode.ssd.drafter.SSDDrafter`: speculative speculative decoding
  (:mod:`specjax.decode.ssd`), fused on one device or overlapped across ``ssd_devices``.

:class:`~specjax.decode.stream.Stream` is the streaming form (one device); a
:class:`~specjax.decode.batching.ContinuousBatch` serves many requests through a fixed set of
slots.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax.sharding import Mesh

from specjax.decode import loop, ssd, submesh
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.inputs import check_config
from specjax.decode.loop import Generation
from specjax.decode.ssd.drafter import SSDDrafter
from specjax.drafters.base import Drafter
from specjax.models.decoder import Decoder
from specjax.models.pure import PureModel, as_pure


def generate(
    target: PureModel | Decoder,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter: Drafter | SSDDrafter | None = None,
    seed: int = 0,
    mesh: Mesh | None = None,
    buckets: ShapeBuckets = DEFAULT,
    *,
    draft_mesh: Mesh | None = None,
    ssd_devices: tuple | None = None,
) -> Generation:
    """Generates for every prompt; compiled programs are kept per shape bucket.

    Args:
      target: the target model (a :class:`~specjax.models.Decoder` as loaded, or its
        :class:`PureModel`).
      prompts: token ids per row (any lengths >= 1).
      config: the :class:`DecodeConfig` (``verifier="autoregressive"`` for the baseline).
      drafter: a drafter (:class:`~specjax.drafters.ModelDrafter`,
        :class:`~specjax.drafters.NgramDrafter`,
        :class:`~specjax.drafters.feature.FeatureDrafter`), an
        :class:`~specjax.decode.ssd.SSDDrafter` for SSD, or None for autoregressive decoding.
      seed: the PRNG seed; row b draws from ``fold_in(key(seed), b)``.
      mesh: the target's device mesh (:func:`specjax.sharding.make_mesh`), the models already
        placed on it, or None for one device.
      buckets: the shape buckets prompts and batch are padded to.
      draft_mesh: a mesh of other devices holding a model draft (needs ``mesh``).
      ssd_devices: with an SSD drafter, ``(target_device, draft_device)`` to overlap drafting
        with verification; None fuses the rounds into one program on one device.

    Returns:
      A :class:`Generation`: tokens per row, the text-free metrics and timings.

    Raises:
      ValueError: for a combination no loop runs (e.g. SSD on a mesh), before any work.
    """
    check_config(config)
    if config.rows and (isinstance(drafter, SSDDrafter) or draft_mesh is not None):
        raise ValueError(
            "per-row sampling (DecodeConfig.rows) runs on one device or one mesh: set "
            "rows=False for SSD or a draft on its own devices"
        )
    if isinstance(drafter, SSDDrafter):
        if mesh is not None or draft_mesh is not None:
            raise ValueError(
                "an SSDDrafter runs on one device or a (target, draft) device pair: pass "
                "ssd_devices=(target_device, draft_device), not a mesh"
            )
        target = as_pure(target)
        return ssd.generate_ssd(target, prompts, config, drafter, seed, ssd_devices, buckets)
    if ssd_devices is not None:
        raise ValueError("ssd_devices places an SSDDrafter's draft: pass an SSDDrafter, or drop it")
    if draft_mesh is not None:
        if mesh is None:
            raise ValueError("draft_mesh needs mesh, the target's own devices beside the draft's")
        if config.speculative and drafter is not None:
            return submesh.generate_on_submeshes(
                as_pure(target), prompts, config, drafter, seed, mesh, draft_mesh, buckets
            )
    return loop.generate_local(target, prompts, config, drafter, seed, mesh, buckets)
