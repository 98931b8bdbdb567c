"""Regenerate tests/fixtures/dino_schedules.json from the official DINO code.

Calls facebookresearch/dino utils.cosine_scheduler unmodified: a warm-up + cosine learning-rate
schedule and the plain cosine teacher-momentum schedule.
"""
from __future__ import annotations

import common

REPOSITORY = "https://github.com/facebookresearch/dino"
COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
FIXTURE = "dino_schedules.json"
WARMUP = dict(base_value=5e-4, final_value=1e-6, epochs=4, niter_per_ep=3, warmup_epochs=1, start_warmup_value=1e-5)
PLAIN = dict(base_value=0.996, final_value=1, epochs=3, niter_per_ep=4)


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    utils = common.import_official(args.official, "utils")
    how = (f"facebookresearch/dino@{args.commit} utils.cosine_scheduler(5e-4, 1e-6, epochs=4, niter_per_ep=3, "
           "warmup_epochs=1, start_warmup_value=1e-5) and cosine_scheduler(0.996, 1, 3, 4).")
    data = {
        "provenance": common.provenance(args, __file__, {"cosine_warmup": WARMUP, "cosine_plain": PLAIN},
                                        ["utils.py"]),
        "how": how,
        "cosine_warmup": [float(v) for v in utils.cosine_scheduler(**WARMUP)],
        "cosine_plain": [float(v) for v in utils.cosine_scheduler(**PLAIN)],
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
