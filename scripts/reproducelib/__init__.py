"""What ``scripts/reproduce.py`` runs: the papers' claims, each measured with specjax's public API.

Scripts run with ``scripts/`` on ``sys.path`` and ``import reproducelib``. One module per concept:

* :mod:`.claims`: a claim row (paper, claim, measurement, verdict), the claim table, number
  formatting;
* :mod:`.chain_exact`: exact laws of the chain verifiers by enumeration (the BV paper's toy
  example, docs/algorithms.md's golden values), the full-joint optimum by linear programming, and
  a drafted block's exact expected accepted length;
* :mod:`.multidraft_exact`: the closed-form acceptance rates of :mod:`specjax.verify.acceptance`
  checked against the NumPy reference laws on random pairs;
* :mod:`.pairs`: the model pairs (the committed Shakespeare pair, SmolLM2 with a layer-truncated
  self-draft, SmolLM2 with its learned feature draft head), each with how to build its drafter,
  and their prompts;
* :mod:`.logged`: target and draft laws logged on decoded text (the multi-draft claims' input);
* :mod:`.observe`: real block-verification decoding that also returns, per step, each chain
  verifier's exact expected accepted length on the step's draft;
* one module per claim group: :mod:`.toy` (claim 1), :mod:`.bv_token` (2), :mod:`.gbv` (3),
  :mod:`.multidraft` (4), :mod:`.ssd` (5);
* :mod:`.plots` (the PNGs) and :mod:`.report` (the header and the assembled REPRODUCTION.md).
"""
