"""On the GPU: is a row's logits the same in a batch of n rows as alone? (the engine's EXACT_ROWS).

    python rows.py PROJECT_DIR MODEL.gguf OUT.json
"""

import json
import sys

sys.path.insert(0, sys.argv[1])
from utils.embedded.runtime.runner import ModelRunner  # noqa: E402 - first: llama.cpp before numpy

# isort: split
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

runner = ModelRunner("t", Path(sys.argv[2]), 4096, 16, gpu_layers=-1)
runner.jobs.put(None)  # stop the worker: this script drives the model itself
runner.thread.join()
rng = np.random.default_rng(0)
context = [int(t) for t in rng.integers(100, 50000, 300)]
drafts = [int(t) for t in rng.integers(100, 50000, 16)]
runner.exact_rows = 64
alone = []
runner._evaluate(context, first_row=len(context) - 1)
for i in range(len(drafts) + 1):
    alone.append(runner._evaluate(context + drafts[:i], first_row=len(context) + i - 1)[-1].copy())
out = {}
for n in range(2, 17):
    rows = runner._evaluate(context + drafts[: n - 1], first_row=len(context) - 1)
    diffs = [float(np.max(np.abs(rows[i] - alone[i]))) for i in range(n)]
    same_argmax = all(int(np.argmax(rows[i])) == int(np.argmax(alone[i])) for i in range(n))
    out[n] = {"max_abs_diff": max(diffs), "bitwise_equal": max(diffs) == 0.0, "same_argmax": same_argmax}
    print(n, "rows:", out[n], flush=True)
json.dump(out, open(sys.argv[3], "w"), indent=1)
