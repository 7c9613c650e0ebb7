r"""The default pair: the committed Shakespeare target (3.2M parameters, byte-level) with its
distilled 0.43M-parameter draft, block verification at temperature 1. The README's main command.
Every decode key is set here with its default; docs/config.md explains each.

Command:  python -m specjax.decode --config configs/shakespeare.py
Variants: --config.verifier=gbv --config.num_paths=3   (any verifier, any K)
          --config.temperature=0 --config.compare_autoregressive=True
          --config.stream=True   (print text as it is accepted)
Costs:    python -m specjax.calibrate --config configs/shakespeare.py \
              --config.width_costs=costs.json
          measures the width costs once; decode with the same flag reads them.
Results:  BENCHMARKS.md "Adaptive draft width" and "Decoding loop".
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # Models.
    c.target = "checkpoints/shakespeare/target"  # checkpoint dir | .gguf | HF dir | smollm2
    c.drafter = "model"  # model | ngram | self | eagle (feature head) | none (autoregressive)
    c.draft = "checkpoints/shakespeare/draft"  # drafter=model: checkpoint; eagle: head dir
    c.draft_layers = 1  # drafter=self: target layers kept by the self-draft
    c.ngram_max = 3  # drafter=ngram: longest suffix matched
    c.ngram_min = 1
    c.dtype = ""  # "" keeps the checkpoint's dtype; float32 | bfloat16
    c.fuse_projections = False  # q/k/v and gate/up as one GEMM each (target and draft model)
    c.weight_quant = ""  # "" | int8 | fp8: the target's weights, per channel (GPUs; slow on CPU)
    # Speculation (vLLM's names where one exists).
    c.verifier = "block"  # greedy | token | block | gumbel | specinfer | spectr | gbv
    c.num_speculative_tokens = 4  # L
    c.num_paths = 1  # K (> 1 needs specinfer, spectr or gbv)
    c.replacement = True  # the drafter's; False: paths drawn without replacement (specinfer only)
    c.top_paths = False  # drafter=eagle: paths start at the head's K likeliest tokens (T = 0)
    c.widths = "auto"  # auto: each step drafts L or none (a one-token step) | fixed | e.g. 0,2,4
    # "" = measured at T = 0 / gumbel, else guessed; 1,1.8 or costs.json (specjax.calibrate)
    c.width_costs = ""
    # Speculative speculative decoding (mode=ssd; see configs/shakespeare_ssd.py).
    c.mode = "sd"  # sd | ssd
    c.ssd_fan_out = "geometric"  # geometric | uniform | L + 1 ints: bonus guesses per k
    c.ssd_fan_out_miss = ""  # after a backup-served round ("" = ssd_fan_out), same sum
    c.ssd_budget = 8  # C, branches per row (geometric / uniform)
    c.ssd_alpha = 0.8  # acceptance rate the geometric fan-out assumes
    c.ssd_saguaro = 1.0  # Saguaro factor on the draft's top tokens (1 = off)
    c.ssd_saguaro_top = 0  # tokens it scales (0 = the largest fan-out)
    c.ssd_backup = "jit"  # jit | ngram | none: speculation for a row whose outcome missed
    c.ssd_draft_device = ""  # "" = the target's device (fused rounds) | next | cpu
    # Sampling, applied identically to draft and target.
    c.temperature = 1.0  # 0 = greedy
    c.top_k = 0
    c.top_p = 1.0
    c.seed = 0
    c.max_new_tokens = 200
    c.stop_at_eos = True
    c.stop_tokens = ()  # extra stop ids
    # Prompts.
    c.prompt = "ROMEO:\n"
    c.prompts_file = ""  # one prompt per line ("\n" escapes allowed); overrides prompt
    c.batch_size = 1  # rows (slots) decoded together; finished rows are refilled
    c.chat = False  # wrap prompts in the tokenizer's chat template
    # Batch jobs (README "Batch jobs"): continuous batching, results streamed as prompts finish.
    c.input = ""  # JSONL ({"id": ..., "prompt": ... | "messages": [...]}) or one prompt per line
    c.results = ""  # JSONL, one record per prompt, appended as each finishes (process 0)
    c.resume = False  # skip the ids already in results (a torn last line is cut off)
    c.progress = "auto"  # auto (on a terminal) | on | off: progress on stderr
    # Output.
    c.stream = False  # print row 0's text as it is accepted
    c.compare_autoregressive = False  # also decode autoregressively: speedup, greedy check
    c.metrics_json = ""  # write metrics + generated ids here (atomically)
    c.output = ""  # write the generated texts here (atomically)
    # Compilation (see docs/usage.md "Compiling once").
    c.prompt_buckets = "64,128,256,512,1024,2048,4096"  # prompts padded up to these lengths
    c.batch_buckets = "1,2,4,8,16,32,64,128"  # batches padded up to these sizes ("" = exact)
    # auto ($SPECJAX_COMPILATION_CACHE, else <$SPECJAX_CACHE or ~/.cache/specjax>/xla) | off | a dir
    c.compilation_cache = "auto"
    # Devices (see README "Sharded and multi-host decoding").
    c.mesh_shape = ""  # e.g. "2,4": a (data, model) mesh; "" = one device
    c.mesh_axes = "data,model"
    c.draft_placement = "replicated"  # replicated | sharded (tensor-parallel) | submesh
    c.draft_mesh_shape = ""  # submesh: the draft's own mesh, on the devices after the target's
    c.num_cpu_devices = 0  # > 0: emulate this many CPU devices (testing meshes on one CPU)
    c.coordinator_address = ""  # multi-process: host:port of process 0, or "auto"
    c.num_processes = 1
    c.process_id = 0
    c.init_timeout = 120.0  # seconds to wait for every process at start-up
    return c
