"""Run on 8 emulated CPU devices (a subprocess of tests/test_sharding.py): sharded decoding over a
2 x 4 ('data', 'model') mesh gives the single-device tokens, with parameters and caches split."""

from __future__ import annotations

import sys

import jax
import numpy as np
from flax import nnx

from specjax import sharding
from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import compile_generation, constrain_state, prefill_program, prepare
from specjax.drafters import ModelDrafter
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams
from specjax.testing import pair

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [12], [4, 4, 4, 4]]
GREEDY = SamplingParams(0.0)


def placed(model: PureModel, mesh, replicated: bool) -> PureModel:
    """A copy of ``model`` on ``mesh`` (the original stays on its single device)."""
    module = nnx.clone(model.module)
    return PureModel.of(sharding.shard_module(module, mesh, replicated))


def main(which: str) -> None:
    assert len(jax.devices()) == 8, jax.devices()
    mesh = sharding.make_mesh("2,4")
    target, draft = pair(sigma=0.05, num_heads=8, num_kv_heads=4)
    s_target = placed(target, mesh, replicated=False)
    s_draft_tp = placed(draft, mesh, replicated=False)
    s_draft_rep = placed(draft, mesh, replicated=True)
    single = jax.devices()[0]
    for model in (target, draft):  # the references really run on one device
        assert all(x.sharding.device_set == {single} for x in jax.tree.leaves(model.state))

    if which in ("all", "shapes"):
        wq = s_target.module.layers[0].attn.wq[...]  # [D, H, E] heads over model
        assert sharding.shard_shapes(wq)[0] == (32, 2, 4), sharding.shard_shapes(wq)
        embed = s_target.module.embed[...]  # [V, D] vocab over model
        assert sharding.shard_shapes(embed)[0] == (12, 32)
        w_down = s_target.module.layers[0].mlp.w_down[...]  # [F, D] row-parallel
        assert sharding.shard_shapes(w_down)[0] == (16, 32)
        assert sharding.shard_shapes(s_draft_rep.module.embed[...])[0] == (48, 32)
        drafter = ModelDrafter(s_draft_tp, num_paths=3, draft_len=2, sampling=GREEDY)
        cfg = DecodeConfig("gbv", GREEDY, 8)
        b = prepare(s_target, drafter, PROMPTS, cfg, batch_multiple=2)
        rows = lambda x: sharding.put(x, sharding.batch_sharding(mesh, x.ndim))
        init = jax.jit(
            lambda t, d, p, n, a: constrain_state(
                prefill_program(t, d, p, n, a, 0, capacity=b.capacity, buffer=b.buffer),
                mesh,
                True,
            )
        )
        state = init(s_target, drafter, rows(b.prompts), rows(b.lengths), rows(b.active))
        k = state.target_cache.k  # [N, B, S, G, E]: rows over data, KV heads over model
        n, b, s, g, e = k.shape
        assert set(sharding.shard_shapes(k)) == {(n, b // 2, s, g // 4, e)}
        assert set(sharding.shard_shapes(state.draft_state.k)) == {(n - 0, b // 2, s, 1, e)}
        assert set(sharding.shard_shapes(state.tokens)) == {(b // 2, state.tokens.shape[1])}
        print("shapes-ok")

    if which in ("all", "greedy", "greedy-quick"):
        cases = [
            ("greedy", 1),
            ("token", 1),
            ("block", 1),
            ("specinfer", 3),
            ("spectr", 3),
            ("gbv", 1),
            ("gbv", 3),
        ]
        if which == "greedy-quick":  # the tensor-parallel draft, K = 3
            cases = [("gbv", 3)]
        for verifier, k in cases:
            cfg = DecodeConfig(verifier, GREEDY, 16)
            want = generate(
                target, PROMPTS, cfg, ModelDrafter(draft, num_paths=k, draft_len=3, sampling=GREEDY)
            ).tokens
            d = s_draft_tp if k == 3 else s_draft_rep
            got = generate(
                s_target,
                PROMPTS,
                cfg,
                ModelDrafter(d, num_paths=k, draft_len=3, sampling=GREEDY),
                mesh=mesh,
            )
            assert got.tokens == want, (verifier, k, got.tokens, want)
        ar = generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, 16)).tokens
        assert ar == want
        print(f"{which}-ok")

    if which in ("all", "sampled"):
        t1 = SamplingParams(1.0)
        for verifier, k in [("block", 1), ("specinfer", 2)]:
            cfg = DecodeConfig(verifier, t1, 16)
            want = generate(
                target,
                PROMPTS,
                cfg,
                ModelDrafter(draft, num_paths=k, draft_len=3, sampling=t1),
                seed=3,
            ).tokens
            got = generate(
                s_target,
                PROMPTS,
                cfg,
                ModelDrafter(s_draft_rep, num_paths=k, draft_len=3, sampling=t1),
                seed=3,
                mesh=mesh,
            ).tokens
            assert got == want, (verifier, got, want)
        print("sampled-ok")

    if which in ("all", "feature"):  # the feature drafter, its head replicated on the mesh
        from specjax.drafters.feature import FeatureDrafter
        from tests.test_feature_drafter import random_head

        head = random_head(target, 32)
        s_head = nnx.clone(head)
        sharding.shard_module(s_head, mesh, True)
        s_head.embed = type(s_head.embed)(s_target.module.embed[...])  # the target's, as the CLI
        for params, verifier, k in [(GREEDY, "block", 1), (SamplingParams(1.0), "gbv", 3)]:
            cfg = DecodeConfig(verifier, params, 16)
            want = generate(
                target,
                PROMPTS,
                cfg,
                FeatureDrafter(head, num_paths=k, draft_len=3, sampling=params),
                seed=2,
            )
            got = generate(
                s_target,
                PROMPTS,
                cfg,
                FeatureDrafter(s_head, num_paths=k, draft_len=3, sampling=params),
                seed=2,
                mesh=mesh,
            )
            assert got.tokens == want.tokens, (verifier, got.tokens, want.tokens)
        print("feature-ok")

    if which in ("all", "widths"):  # adaptive widths: every device takes the same width
        for params, verifier, k, policy in [
            (SamplingParams(1.0), "block", 1, "random"),
            (SamplingParams(1.0), "gbv", 3, "random"),
            (GREEDY, "block", 1, "auto"),
        ]:
            cfg = DecodeConfig(verifier, params, 16, widths=(0, 1, 3), width_policy=policy)
            want = generate(
                target,
                PROMPTS,
                cfg,
                ModelDrafter(draft, num_paths=k, draft_len=3, sampling=params),
                seed=4,
            )
            d = s_draft_tp if k == 3 else s_draft_rep
            got = generate(
                s_target,
                PROMPTS,
                cfg,
                ModelDrafter(d, num_paths=k, draft_len=3, sampling=params),
                seed=4,
                mesh=mesh,
            )
            assert got.tokens == want.tokens, (verifier, policy, got.tokens, want.tokens)
            assert sum(got.metrics.width_steps.values()) == got.metrics.target_forwards
        print("widths-ok")

    if which in ("all", "submesh"):
        from specjax.decode.submesh import split_devices

        t_mesh, d_mesh = split_devices("2,2", "2,2")
        assert not set(t_mesh.devices.flat) & set(d_mesh.devices.flat)
        t_on = placed(target, t_mesh, replicated=False)
        d_on = placed(draft, d_mesh, replicated=False)
        assert set(d_on.module.embed[...].sharding.device_set) == set(d_mesh.devices.flat)
        from specjax.decode import submesh

        programs = {}  # the step's executables by function name, to read their donations
        compile_program = submesh.PROGRAMS.program

        def recorded(fn, args, static=None, donate=()):
            out = compile_program(fn, args, static, donate)
            programs[fn.__name__] = out[0]
            return out

        submesh.PROGRAMS.program = recorded
        for params, verifier, k in [(GREEDY, "block", 1), (SamplingParams(1.0), "gbv", 2)]:
            cfg = DecodeConfig(verifier, params, 16)
            want = generate(
                target,
                PROMPTS,
                cfg,
                ModelDrafter(draft, num_paths=k, draft_len=3, sampling=params),
                seed=5,
            )
            drafter = ModelDrafter(d_on, num_paths=k, draft_len=3, sampling=params)
            got = generate(t_on, PROMPTS, cfg, drafter, 5, t_mesh, draft_mesh=d_mesh)
            assert got.tokens == want.tokens, (verifier, got.tokens, want.tokens)
            assert got.metrics.steps == want.metrics.steps
        del submesh.PROGRAMS.program
        # Verification updates the target's cache in place: its program donates the state (the
        # cache's two leaves among its aliases), and the key split takes the keys alone.
        text = programs["_verify"].as_text()
        assert "input_output_alias={" in text, "the verification program donates nothing"
        aliases = text.split("input_output_alias={")[1].split("\n")[0]
        assert aliases.count("may-alias") + aliases.count("must-alias") >= 2, aliases
        assert "input_output_alias={" in programs["_commit"].as_text()  # the proposed state
        assert "input_output_alias" not in programs["_split"].as_text()
        assert programs["_split"].in_tree.num_leaves == 1
        try:
            split_devices("2,4", "1,2")
        except ValueError as err:
            assert "10 devices" in str(err) and "8 are available" in str(err), err
        else:
            raise AssertionError("10 devices accepted")
        print("submesh-ok")

    if which in ("all", "loading"):
        import tempfile

        from specjax.models import load_gguf, load_on_mesh, load_pretrained
        from specjax.models.hf_params import params_to_hf
        from tests import loader_fixtures as tl

        flat = lambda m: jax.tree.leaves(nnx.to_pure_dict(nnx.state(m)))
        path = "checkpoints/shakespeare/target"
        module, _ = load_on_mesh(path, None, mesh)  # orbax restores into the shardings
        wq = module.layers[0].attn.wq[...]
        assert set(sharding.shard_shapes(wq)) == {(256, 2, 32)}, sharding.shard_shapes(wq)
        for a, b in zip(flat(module), flat(load_pretrained(path).model), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        mesh42 = sharding.make_mesh("4,2")
        config = tl.cfgs.tiny(vocab_size=256, name="tiny-test")
        with tempfile.TemporaryDirectory() as tmp:
            hf = params_to_hf(tl.random_params(config), config)
            gguf_path = tl.write_gguf(f"{tmp}/tiny.gguf", config, hf, tokenizer=False)
            module, _ = load_on_mesh(gguf_path, None, mesh42)  # placed shard by shard
            _, params, _ = load_gguf(gguf_path)
        w_up = module.layers[0].mlp.w_up[...]  # [D, F] column-parallel
        assert set(sharding.shard_shapes(w_up)) == {(config.dim, config.ffn_dim // 2)}
        for a, b in zip(flat(module), jax.tree.leaves(params), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        print("loading-ok")

    if which in ("all", "nogather"):
        # With V / model a multiple of the sampler's 256-token blocks, verification never
        # gathers a whole [rows, V] vocabulary onto one device (GBV's argsort does: not tested).
        vocab = 2048
        big_t, big_d = pair(vocab=vocab, num_heads=8, num_kv_heads=4)
        t_on, d_on = placed(big_t, mesh, False), placed(big_d, mesh, True)
        for verifier, k, params in [
            ("greedy", 1, GREEDY),
            ("token", 1, SamplingParams(1.0)),
            ("block", 1, SamplingParams(1.0)),
            ("specinfer", 2, SamplingParams(1.0)),
            ("spectr", 2, SamplingParams(1.0)),
        ]:
            cfg = DecodeConfig(verifier, params, 8)
            drafter = ModelDrafter(d_on, num_paths=k, draft_len=3, sampling=params)
            _, hlo = compile_generation(t_on, PROMPTS, cfg, drafter, mesh)
            full = [
                line
                for line in hlo.as_text().splitlines()
                if "all-gather(" in line and (f",{vocab}]" in line or f"[{vocab}]" in line)
            ]
            assert not full, (verifier, full[:3])
        print("nogather-ok")

    if which in ("all", "weights", "weights-quick"):  # fused, int8 (tests/test_fused_weights.py)
        import warnings

        from specjax.models import fuse_projections, quantize_weights

        warnings.filterwarnings("ignore", "weight_quant=int8 on the CPU")
        # G = 4 KV heads split over the model axis, each device its q/k/v groups; G = 2: the
        # axis does not divide them, so wqkv is replicated (as wk / wv are unfused)
        for kv, wqkv_shard in ((4, (32, 1, 4, 4)), (2, (32, 2, 6, 4))):
            t, d = pair(sigma=0.05, num_heads=8, num_kv_heads=kv)
            single = quantize_weights(fuse_projections(t), "int8")
            on_mesh = placed(t, mesh, replicated=False)  # fused and quantized on the mesh
            s_t = quantize_weights(fuse_projections(on_mesh), "int8")
            for model in (placed(single, mesh, replicated=False), s_t):
                layer = model.module.layers[0]
                shards = lambda x: set(sharding.shard_shapes(x[...]))
                assert shards(layer.attn.wqkv) == {wqkv_shard}, shards(layer.attn.wqkv)
                assert shards(layer.attn.wqkv_scale) == {wqkv_shard[1:]}
                assert shards(layer.mlp.w_gate_up) == {(32, 2, 16)}, shards(layer.mlp.w_gate_up)
                assert shards(layer.mlp.w_gate_up_scale) == {(2, 16)}
                assert shards(layer.attn.wo) == {(2, 4, 32)}
            for a, b in zip(jax.tree.leaves(single.state), jax.tree.leaves(s_t.state), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            if which == "weights-quick" and kv == 2:  # decoding it: the slow tier
                continue
            cfg = DecodeConfig("gbv", GREEDY, 16)
            want = generate(single, PROMPTS, DecodeConfig("autoregressive", GREEDY, 16)).tokens
            drafter = ModelDrafter(placed(d, mesh, True), num_paths=3, draft_len=3, sampling=GREEDY)
            got = generate(s_t, PROMPTS, cfg, drafter, mesh=mesh)
            assert got.tokens == want, (kv, got.tokens, want)
            assert got.metrics.accepted_tokens > 0
        print(f"{which}-ok")

    if which in ("all", "errors"):
        for shape in ("3,3", "16"):
            try:
                sharding.make_mesh(shape, ("data", "model")[: len(shape.split(","))])
            except ValueError as err:
                assert "devices" in str(err) and "8" in str(err), err
            else:
                raise AssertionError(f"mesh {shape} accepted")
        bad_target, _ = pair(num_heads=6, num_kv_heads=2, dim=48)
        try:
            generate(bad_target, PROMPTS, DecodeConfig("autoregressive", GREEDY, 4), mesh=mesh)
        except ValueError as err:
            assert "num_heads 6" in str(err) and "model axis 4" in str(err), err
        else:
            raise AssertionError("6 heads over a model axis of 4 accepted")
        # A batch that does not divide the data axis is padded, not refused.
        cfg = DecodeConfig("autoregressive", GREEDY, 4)
        odd = generate(s_target, PROMPTS[:3], cfg, mesh=mesh)
        assert odd.tokens == generate(target, PROMPTS[:3], cfg).tokens
        print("errors-ok")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "all")
