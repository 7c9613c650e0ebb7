"""A decode state larger than the devices' memory is one error before anything compiles."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specjax.decode import DecodeConfig, generate, memory
from specjax.decode.programs import PROGRAMS, prefill_program
from specjax.drafters import ModelDrafter
from specjax.sampling import SamplingParams
from specjax.testing import pair

GREEDY = SamplingParams(0.0)


def test_the_state_bytes_are_the_caches_and_buffers_of_every_row():
    target, draft = pair()
    rows, width, capacity, buffer = 3, 8, 40, 48
    args = (
        target,
        ModelDrafter(draft, num_paths=1, draft_len=2, sampling=GREEDY),
        np.zeros((rows, width), np.int32),
        np.ones((rows,), np.int32),
        np.ones((rows,), bool),
        np.int32(0),
    )
    state = jax.eval_shape(lambda *a: prefill_program(*a, capacity=capacity, buffer=buffer), *args)
    kv = lambda c: 2 * c.num_layers * rows * capacity * c.num_kv_heads * c.head_dim * 4
    caches = kv(target.config) + kv(draft.config)
    assert caches < memory.state_bytes(state) < caches + rows * 4096  # + buffers and scalars
    assert memory.free_memory(jax.local_devices()[:1]) > 2**30  # the host's RAM, on CPU


def test_a_state_larger_than_memory_is_one_error_naming_the_batch(monkeypatch):
    monkeypatch.setattr(memory, "free_memory", lambda devices: 10_000)
    target, draft = pair()
    drafter = ModelDrafter(draft, num_paths=1, draft_len=2, sampling=GREEDY)
    config = DecodeConfig("block", GREEDY, 37)  # a shape no other test compiles
    before = PROGRAMS.compiled
    with pytest.raises(ValueError, match=r"\d+ rows x \d+ cache slots needs .*batch_size"):
        generate(target, [[1, 2], [3], [4, 5, 6]], config, drafter)
    assert PROGRAMS.compiled == before  # nothing compiled
