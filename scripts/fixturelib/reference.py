"""Drawing a fixture's weights, choosing its seed and computing its references with
transformers (float32, eager attention)."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from absl import logging

from fixturelib.families import Family, token_ids
from fixturelib.tokens import MESSAGES, TEXT, build_tokenizer, tokenizer_config

NEW_TOKENS = 32
MIN_GAP = 1e-3  # the smallest top-2 logit gap allowed at a greedy step
MIN_EFFECT = 0.05  # the smallest max |delta logit| a distinguishing feature must cause
SEED_TRIES = 40
PROMPT_LENS = (12, 17, 24)  # all longer than the sliding windows (8)


def draw_weights(model: torch.nn.Module, family: Family, seed: int) -> None:
    """Redraws every parameter with NumPy (not torch's init, so reruns match across torch
    versions): norms at their init value (1, or 0 for Gemma's 1 + w) + N(0, norm_std^2),
    biases N(0, 0.3^2), embeddings N(0, emb_std^2), projections N(0, gain^2 / fan_in)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights appear once
            shape = tuple(p.shape)
            if "norm" in name:
                value = p.numpy() + rng.normal(0.0, family.norm_std, shape)
            elif name.endswith("bias"):
                value = rng.normal(0.0, 0.3, shape)
            elif "embed_tokens" in name or "lm_head" in name:
                value = rng.normal(0.0, family.emb_std, shape)
            else:
                value = rng.normal(0.0, family.gain / np.sqrt(shape[1]), shape)
            p.copy_(torch.from_numpy(value.astype(np.float32)))


def build_model(family: Family, ids: dict, changes: dict | None = None):
    """A model of the family with transformers' init, and the stop tokens it will be saved
    with (so that min_new_tokens masks all of them in the greedy runs)."""
    hub = family.hub(ids)
    config_cls = transformers.AutoConfig.for_model(hub["model_type"]).__class__
    # a deep copy: the config classes complete rope_parameters in place
    kwargs = copy.deepcopy({**family.v5_config(ids), **(changes or {})})
    config = config_cls(**kwargs, architectures=hub["architectures"])
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager", dtype=torch.float32
    )
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=token_ids(ids, *family.tok.stops),
        pad_token_id=ids.get(family.tok.pad),
    )
    return model.eval()


def load(directory: Path):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, attn_implementation="eager", dtype=torch.float32
    )
    return model.eval()


@torch.no_grad()
def prompt_logits(model, prompts) -> list[np.ndarray]:
    return [model(torch.tensor([p])).logits[0].numpy() for p in prompts]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@torch.no_grad()
def greedy(model, prompt) -> tuple[list[int], np.ndarray]:
    """32 greedy tokens (no stop at EOS) and the raw logits of each step, [32, V]."""
    out = model.generate(
        torch.tensor([prompt]),
        do_sample=False,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        output_logits=True,
        return_dict_in_generate=True,
    )
    tokens = out.sequences[0, len(prompt) :].tolist()
    return tokens, torch.cat(out.logits).numpy()


def top2_gap(logits: np.ndarray) -> np.ndarray:
    top = np.sort(logits, axis=-1)[..., -2:]
    return top[..., 1] - top[..., 0]


def try_seed(family: Family, ids: dict, seed: int, prompts) -> dict | None:
    """The model and its references for one seed, or None when a check fails."""
    model = build_model(family, ids)
    draw_weights(model, family, seed)
    logits = prompt_logits(model, prompts)
    runs = [greedy(model, p) for p in prompts]
    steps = [step for _, step in runs]
    # The same steps without the KV cache (a sliding window cache is easy to get wrong)
    full = prompt_logits(model, [p + t for p, (t, _) in zip(prompts, runs, strict=True)])
    drift = max_diff([f[len(p) - 1 : -1] for f, p in zip(full, prompts, strict=True)], steps)
    assert drift < 1e-4, f"{family.name}: cached and full-forward greedy logits differ by {drift}"
    gaps = top2_gap(np.concatenate(steps))
    for tokens, step in runs:
        # min_new_tokens masks EOS: the tokens must be the raw argmax all the same
        if tokens != np.argmax(step, axis=-1).tolist() or len(set(tokens)) < 4:
            logging.info(
                "%s seed %d: EOS was the argmax, or < 4 distinct: %s", family.name, seed, tokens
            )
            return None
    if gaps.min() <= MIN_GAP:
        logging.info("%s seed %d: top-2 gap %.3g", family.name, seed, gaps.min())
        return None
    sensitivity = {}
    state = model.state_dict()
    for name, (changes, reset) in family.features.items():
        other = build_model(family, ids, changes)
        fresh = other.state_dict()  # transformers' init: norms 1 (Gemma 0), biases 0
        other.load_state_dict(
            {k: fresh[k] if reset and reset in k else v for k, v in state.items()}
        )
        sensitivity[name] = max_diff(logits, prompt_logits(other, prompts))
    if min(sensitivity.values()) < MIN_EFFECT:
        logging.info("%s seed %d: a feature barely matters %s", family.name, seed, sensitivity)
        return None
    everything = np.concatenate([*logits, *steps])
    return {
        "model": model,
        "seed": seed,
        "logits": logits,
        "greedy": [tokens for tokens, _ in runs],
        "min_gap": float(gaps.min()),
        "drift": drift,
        "max_abs_logit": float(np.max(np.abs(everything))),
        "sensitivity": sensitivity,
    }


def r7(x) -> list:
    """Float32 values as nested lists, rounded to 7 significant digits."""
    return [r7(v) for v in x] if np.ndim(x) > 0 else float(f"{float(x):.7g}")


def to_json(obj, indent: int = 0) -> str:
    """JSON with each list of scalars on one line (the logits stay readable and diffable)."""
    pad = " " * indent
    if isinstance(obj, dict):
        items = [
            f"{pad}  {json.dumps(k)}: {to_json(v, indent + 2).lstrip()}" for k, v in obj.items()
        ]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and isinstance(obj[0], (list, dict)):
        items = [to_json(v, indent + 2) for v in obj]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(obj, ensure_ascii=False)


def write_json(path: Path, obj) -> None:
    path.write_text(to_json(obj) + "\n", encoding="utf-8")


def check_hub_config(directory: Path, hub: dict, expected: list[np.ndarray], prompts) -> None:
    """The hub-style config with the same weights gives exactly the same logits."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(directory / "model.safetensors", tmp)
        write_json(Path(tmp) / "config.json", hub)
        got = prompt_logits(load(Path(tmp)), prompts)
    assert all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True)), max_diff(
        expected, got
    )


def make(family: Family, merges, out: Path) -> dict:
    tok = build_tokenizer(family.tok, merges)
    ids = {s: tok.token_to_id(s) for s in [*family.tok.specials, *family.tok.plain]}
    vocab_size = family.sizes["vocab_size"]
    assert tok.get_vocab_size() <= vocab_size, (tok.get_vocab_size(), vocab_size)
    rng = np.random.default_rng(1234)  # the same prompts for every seed tried
    prompts = [rng.integers(0, vocab_size, n).tolist() for n in PROMPT_LENS]
    for seed in range(SEED_TRIES):
        found = try_seed(family, ids, seed, prompts)
        if found:
            break
    else:
        raise RuntimeError(f"{family.name}: no seed in range({SEED_TRIES}) passes the checks")

    if out.exists():
        shutil.rmtree(out)
    model = found["model"]
    model.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    write_json(out / "tokenizer_config.json", tokenizer_config(family.tok, tok))
    hub = family.hub_config(ids)
    write_json(out / "config.hub.json", hub)

    loaded = load(out)  # what a user gets from the files: the same logits, bit for bit
    assert max_diff(found["logits"], prompt_logits(loaded, prompts)) == 0.0
    assert [greedy(loaded, p)[0] for p in prompts] == found["greedy"]
    check_hub_config(out, hub, found["logits"], prompts)

    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    text_ids = hf_tok(TEXT).input_ids
    chat_text = hf_tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    chat_ids = hf_tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True)
    chat_ids = chat_ids["input_ids"]  # transformers 5 returns a BatchEncoding here
    # The same ids from tokenizer.json alone (what a torch-free loader reads)
    assert text_ids == tok.encode(TEXT).ids, (text_ids, tok.encode(TEXT).ids)
    assert chat_ids == tok.encode(chat_text, add_special_tokens=False).ids
    assert hf_tok.decode(text_ids, skip_special_tokens=True) == TEXT
    gen = json.loads((out / "generation_config.json").read_text())
    stop_list = (
        gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
    )

    reference = {
        "family": family.name,
        "model_class": model.__class__.__name__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "dtype": "float32",
        "attn_implementation": "eager",
        "seed": found["seed"],
        "greedy_min_top2_gap": round(found["min_gap"], 6),
        "greedy_cache_vs_full_forward": float(f"{found['drift']:.2g}"),
        "max_abs_logit": round(found["max_abs_logit"], 4),
        "sensitivity": {k: round(v, 4) for k, v in found["sensitivity"].items()},
        "tokenizer": {
            "text": TEXT,
            "input_ids": text_ids,
            "messages": MESSAGES,
            "chat_text": chat_text,
            "chat_ids": chat_ids,
            "stop_token_ids": stop_list,
        },
        "prompts": prompts,
        "greedy": found["greedy"],
        "prompt_logits": [r7(x) for x in found["logits"]],
    }
    write_json(out / "reference.json", reference)
    return reference
