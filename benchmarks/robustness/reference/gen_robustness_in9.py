"""Regenerate benchmarks/robustness/fixtures/robustness_in9.json from MadryLab's backgrounds challenge code.

Runs MadryLab/backgrounds_challenge tools/model_utils.py ``eval_model(loader, model, map_to_in9,
map_in_to_in9=True)`` unmodified, with ``map_to_in9`` read from the checkout's in_to_in9.json as
in9_eval.py reads it, on 1000-way logits: one one-hot row per ImageNet class (the whole mapping)
and seeded random rows (each a permutation of 0..999 as float32: exact, no tie), with seeded IN-9
targets. The model is ``torch.nn.Identity`` (the logits are the loader's inputs). ``torch.LongTensor``
is wrapped while eval_model runs to record the mapped predictions it builds; ``dill`` (imported by
the module, unused by eval_model) is stubbed. Needs timm and tqdm.
"""
from __future__ import annotations

import json

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures

REPOSITORY = "https://github.com/MadryLab/backgrounds_challenge"
COMMIT = "46d224bb02a296681eddbae44a49da9abb5ba038"
FIXTURE = "robustness_in9.json"
SEED = 9
N_RANDOM = 500


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import numpy as np
    import torch

    official = common.import_official(args.official, "tools.model_utils", {"dill": {}})
    map_to_in9 = json.loads((args.official / "in_to_in9.json").read_text())
    rng = np.random.default_rng(SEED)
    rows = np.concatenate([np.eye(1000, dtype=np.float32),
                           np.stack([rng.permutation(1000) for _ in range(N_RANDOM)]).astype(np.float32)])
    targets = rng.integers(0, 9, len(rows))
    data = torch.utils.data.TensorDataset(torch.from_numpy(rows), torch.from_numpy(targets))
    loader = torch.utils.data.DataLoader(data, batch_size=100, shuffle=False)
    seen, long_tensor = [], torch.LongTensor

    def recording(values):
        seen.extend(int(v) for v in values)
        return long_tensor(values)

    torch.LongTensor = recording
    try:
        acc = official.eval_model(loader, torch.nn.Identity(), map_to_in9, map_in_to_in9=True)
    finally:
        torch.LongTensor = long_tensor
    out = {"provenance": common.provenance(args, __file__, {"seed": SEED, "n_random": N_RANDOM, "batch_size": 100},
                                           ["tools/model_utils.py", "in_to_in9.json"], extra_modules=("timm",)),
           "how": "eval_model on one-hot rows for classes 0..999, then N_RANDOM permutation rows; "
                  "argmax_1000 is each row's argmax, mapped_in9 what eval_model mapped it to",
           "argmax_1000": rows.argmax(1).tolist(), "targets": targets.tolist(), "mapped_in9": seen,
           "accuracy": float(acc)}
    common.finish(args, out)


if __name__ == "__main__":
    main()
