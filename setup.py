"""specjax: JAX-native speculative decoding."""

from setuptools import find_packages, setup

setup(
    name="specjax",
    version="0.1.0",
    description="JAX-native speculative decoding: exact verifiers, Llama models, decoding loop.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["specjax", "specjax.*"]),
    python_requires=">=3.11",
    install_requires=[
        # jax/jaxlib 0.10.x resolve on Python 3.11; the code also runs on jax 0.11+ / Python 3.12.
        "jax>=0.10.0",
        "jaxlib>=0.10.0",
        "flax>=0.12.8",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11.0",
        "numpy>=1.26",
        "absl-py>=2.0",
        "ml-collections>=1.0",
        "gguf>=0.19.0",
        "safetensors>=0.8.0",
        "tokenizers>=0.23.0",
    ],
    extras_require={
        # Loss-curve plots of scripts/train.py and scripts/distill.py.
        "train": ["matplotlib>=3.8"],
        "dev": [
            "pytest>=8.0",
            "pytest-xdist>=3.5",  # the default tier runs on every core (pyproject addopts)
            "scipy>=1.11",
            "ruff>=0.6",
            # tests/test_notebooks.py runs the colab/ notebooks (the [notebooks] extra).
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
            "matplotlib>=3.8",
            # tests/test_chat_template.py renders chat templates through jinja2 too.
            "jinja2>=3.1",
            # tests/test_serve*.py: the server, and the openai client that talks to it.
            "fastapi>=0.115",
            "uvicorn>=0.30",
            "openai>=1.40",
            "prometheus_client>=0.20",
        ],
        # python -m specjax.serve: the OpenAI-compatible server (docs/serving.md).
        "serve": ["fastapi>=0.115", "uvicorn>=0.30", "prometheus_client>=0.20"],
        # Running the colab/ notebooks locally (python colab/build.py, or jupyter).
        "notebooks": ["nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29", "matplotlib>=3.8"],
        # Parity tests against transformers (tests/test_peer_parity.py) and the PyTorch columns
        # of scripts/bench_model.py. Only this torch: any other version pulls CUDA packages.
        # accelerate: transformers needs it to load a GGUF file.
        "peer": ["torch==2.13.0", "transformers==5.23.0", "accelerate==1.15.0"],
    },
)
