"""The shipped SmolLM2 head, exported to the speculators layout, in the speculators package
itself (slow tier; SmolLM2's GGUF through pip; the peer extra and speculators, installed as
``tests/test_eagle_peer.py`` says): it loads with no missing or unexpected keys (the
verifier-owned ones come from the verifier: SmolLM2 dequantized into a Hugging Face
directory), and its forward, fed transformers' SmolLM2 hidden states along a greedy trajectory,
proposes what specjax's head proposes from specjax's own forward, row by row.

A head standardised with a shift (the shipped one until it is fine-tuned without) is exported
with ``drop_shift`` and compared with itself without the shift."""

from __future__ import annotations

import numpy as np
import pytest

from specjax.decode import AUTOREGRESSIVE, DecodeConfig, generate
from specjax.models import load_pretrained
from specjax.models.eagle_formats import export_head, load_head
from specjax.models.fetch import fetch_smollm2
from specjax.models.pairs import EAGLE_HEAD_DIR
from specjax.models.safetensors_loader import save_safetensors
from specjax.sampling import SamplingParams
from specjax.train import eagle
from tests.eagle_harness import specjax_logits
from tests.test_eagle_peer import VERIFIER_OWNED, load_peer, peer, peer_logits  # noqa: F401

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0)


def test_the_exported_smollm2_head_proposes_in_speculators_what_it_proposes_here(
    peer,  # noqa: F811
    tmp_path,
):
    torch, transformers = peer.torch, pytest.importorskip("transformers")
    gguf = fetch_smollm2()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    ).eval()
    pre = load_pretrained(gguf)
    verifier_dir = save_safetensors(tmp_path / "smollm2", pre.params, pre.config)  # dequantized
    head = load_head(EAGLE_HEAD_DIR, pre.model)
    shifted = bool(np.any(np.asarray(head.feature_shift[...])))
    if shifted:
        head = eagle.without_shift(head)
    verifier = {"name_or_path": str(verifier_dir), "architectures": ["LlamaForCausalLM"]}
    path = export_head(tmp_path / "head", head, "speculators", verifier=verifier)
    model, missing, unexpected = load_peer(peer, path)
    assert not unexpected and missing <= VERIFIER_OWNED, (missing, unexpected)

    tok = pre.tokenizer
    prompt = tok.encode_chat([{"role": "user", "content": "Write a haiku about a lighthouse."}])
    answer = generate(pre.model, [prompt], DecodeConfig(AUTOREGRESSIVE, GREEDY, 48)).tokens[0]
    seq = np.asarray(prompt + answer)
    with torch.no_grad():
        states = hf(torch.tensor(seq[None]), output_hidden_states=True).hidden_states
    ids = [i + 1 for i in head.config.feature_layers]  # block outputs -> block inputs
    aux = np.concatenate([states[i][0].double().numpy() for i in ids], axis=-1)  # [T, 3 D]
    theirs = peer_logits(peer, model, aux, seq)[0]  # step 0, rows 0 .. T - 2
    ours = specjax_logits(head, pre.model, seq, steps=1)[0]
    d2t = np.asarray(head.d2t[...])
    rows = slice(len(prompt) - 1, len(seq) - 1)  # the answer's rows: the trajectory drafted on
    assert np.array_equal(d2t[theirs[rows].argmax(-1)], d2t[ours[rows].argmax(-1)])
