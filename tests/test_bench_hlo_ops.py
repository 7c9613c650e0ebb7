"""bench_accelerator's readers of compiled programs and traces: operations per step from the
optimised HLO text (``hlo_ops``), kernels from a profiler trace's events (``trace``), and the
compiler-option variants a platform runs (``variants``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from benchlib.accelerator import hlo_ops, trace, variants

HLO = """\
HloModule toy, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_add (p0: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  ROOT %add = f32[4]{0} add(%p0, %p0)
}

%graph (g0: f32[4]) -> f32[4] {
  %g0 = f32[4]{0} parameter(0)
  %f1 = f32[4]{0} fusion(%g0), kind=kLoop, calls=%fused_add
  ROOT %f2 = f32[4]{0} fusion(%f1), kind=kLoop, calls=%fused_add
}

%ba (a0: f32[4]) -> f32[4] {
  %a0 = f32[4]{0} parameter(0)
  ROOT %sorted = f32[4]{0} sort(%a0), dimensions={0}, to_apply=%fused_add
}

%bb (b0: f32[4]) -> f32[4] {
  %b0 = f32[4]{0} parameter(0)
  %c = f32[4]{0} copy(%b0)
  ROOT %r = f32[4]{0} custom-call(%c), custom_call_target="__cublas$gemm"
}

%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[4]{0} get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %cb = f32[4]{0} call(%x), to_apply=%graph
  %flag = pred[] constant(true)
  %picked = f32[4]{0} conditional(%flag, %cb, %cb), true_computation=%ba, false_computation=%bb
  %y = f32[4]{0} bitcast(%picked)
  ROOT %out = (s32[], f32[4]{0}) tuple(%next, %y)
}

%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(8)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%zero, %x)
  %loop = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
  ROOT %res = f32[4]{0} get-tuple-element(%loop), index=1
}
"""


def test_count_ops_counts_what_launches_once_per_computation():
    """A ``call`` (a command buffer) is looked through, a fusion is one operation, free ops
    (parameters, constants, tuples, bitcasts) are not counted, and a conditional counts once
    with its largest branch's operations in ``in_loops``."""
    assert hlo_ops.loop_body(HLO) == "body"
    step = hlo_ops.step_ops(HLO)
    # body: add (other), 2 fusions through the call, the conditional
    assert step["fusion"] == 2 and step["other"] == 1 and step["conditional"] == 1
    assert step["total"] == 4 and step["while"] == 0
    assert step["in_loops"] == 2  # bb: copy + custom-call (ba: one sort)
    entry = hlo_ops.count_ops(HLO)
    assert entry["while"] == 1 and entry["total"] == 1
    assert entry["in_loops"] == 4 + 2 + 1  # the body once, its branch, the condition
    assert hlo_ops.grep_ops(HLO) == {"concatenate": 0, "transpose": 0, "copy": 1}


def test_step_ops_reads_a_compiled_decode_like_loop():
    """On a real compiled program (this backend's): the loop's body holds the matmul and
    the elementwise work, and no loop; the ENTRY holds the loop."""

    def program(x, w):
        return jax.lax.while_loop(
            lambda c: c[0] < jnp.sum(c[1]), lambda c: (c[0] + 1, jnp.tanh(c[1] @ w)), (0, x)
        )

    x, w = jnp.ones((2, 8)), jnp.eye(8)
    text = jax.jit(program).lower(x, w).compile().as_text()
    step = hlo_ops.step_ops(text)
    assert step["total"] >= 1 and step["while"] == 0, step
    assert step["dot"] + step["fusion"] + step["custom-call"] >= 1, step
    assert hlo_ops.count_ops(text)["while"] == 1


def test_device_events_counts_gpu_stream_kernels_once():
    """Kernels on the GPU's stream lines count once (the derived 'XLA Ops' line repeats
    them), copies apart, host events not at all."""
    meta = lambda pid, tid, kind, name: dict(
        ph="M", pid=pid, tid=tid, name=kind, args=dict(name=name)
    )
    events = [
        dict(ph="M", pid=1, name="process_name", args=dict(name="/host:CPU")),
        dict(ph="M", pid=2, name="process_name", args=dict(name="/device:GPU:0")),
        meta(2, 7, "thread_name", "Stream #13(Compute)"),
        meta(2, 8, "thread_name", "XLA Ops"),
        dict(ph="X", pid=2, tid=7, name="loop_fusion", dur=3.0),
        dict(ph="X", pid=2, tid=7, name="gemv_kernel", dur=5.0),
        dict(ph="X", pid=2, tid=7, name="MemcpyD2D", dur=1.0),
        dict(ph="X", pid=2, tid=8, name="loop_fusion", dur=3.0),
        dict(ph="X", pid=1, tid=1, name="PjitFunction", dur=50.0),
    ]
    got = trace.device_events({"traceEvents": events})
    lines = "Stream #13(Compute): 3, XLA Ops: 1"
    assert got == dict(kernels=2, kernel_ms=0.008, copies=1, gpu_processes=1, lines=lines)
    assert trace.device_events({"traceEvents": events[:1]})["gpu_processes"] == 0


def test_compiler_variants_run_on_gpu_only():
    on_gpu, note = variants.options_for("gpu", variants.STEP_OPTIONS)
    assert on_gpu == variants.STEP_OPTIONS and note is None
    on_cpu, note = variants.options_for("cpu", variants.STEP_OPTIONS)
    assert on_cpu == {"default": {}} and "graphs + WHILE" in note
    assert "WHILE" in variants.STEP_OPTIONS["graphs + WHILE"]["xla_gpu_enable_command_buffer"]
    assert next(iter(variants.model_variants())) == "default"


def test_loop_body_looks_through_a_command_buffer_call():
    """With WHILE in the command buffers, XLA:GPU may move the loop into a called
    computation: the step is still found."""
    graphed = HLO.replace(
        "  %loop = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body\n",
        "  %loop = (s32[], f32[4]{0}) call(%init), to_apply=%cmd\n",
    ).replace(
        "ENTRY %main",
        "%cmd (c0: (s32[], f32[4])) -> (s32[], f32[4]) {\n"
        "  %c0 = (s32[], f32[4]{0}) parameter(0)\n"
        "  ROOT %w = (s32[], f32[4]{0}) while(%c0), condition=%cond, body=%body\n"
        "}\n\nENTRY %main",
    )
    assert hlo_ops.loop_body(graphed) == "body"
    assert hlo_ops.count_ops(graphed)["while"] == 1
