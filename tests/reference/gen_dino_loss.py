"""Regenerate tests/fixtures/dino_loss.json from the official DINO code.

Runs facebookresearch/dino main_dino.DINOLoss unmodified (one-process gloo group: its centre
update all-reduces) on seeded random student and teacher outputs, four calls with epoch = call.
"""
from __future__ import annotations

import common

REPOSITORY = "https://github.com/facebookresearch/dino"
COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
FIXTURE = "dino_loss.json"
LOSS = dict(out_dim=32, ncrops=6, warmup_teacher_temp=0.04, teacher_temp=0.07, warmup_teacher_temp_epochs=3,
            nepochs=5, student_temp=0.1, center_momentum=0.9)
SEED, CALLS, BATCH, SCALE = 0, 4, 4, 3.0


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import torch

    main_dino = common.import_official(args.official, "main_dino")
    common.init_gloo()
    loss_fn = main_dino.DINOLoss(**LOSS)
    losses, centers = [], []
    torch.manual_seed(SEED)
    for call in range(CALLS):
        student = torch.randn(LOSS["ncrops"] * BATCH, LOSS["out_dim"]) * SCALE
        teacher = torch.randn(2 * BATCH, LOSS["out_dim"]) * SCALE
        losses.append(float(loss_fn(student, teacher, call)))
        centers.append(loss_fn.center.flatten().tolist())
    how = (f"facebookresearch/dino@{args.commit} main_dino.DINOLoss("
           + ", ".join(f"{k}={v}" for k, v in LOSS.items())
           + "), run unmodified (gloo process group, world size 1). torch.manual_seed(0); for call c in 0..3: "
             "student = randn(6*4, 32)*3, teacher = randn(2*4, 32)*3, loss(student, teacher, epoch=c); losses[c] "
             "and the centre after each call.")
    data = {
        "provenance": common.provenance(
            args, __file__, {"DINOLoss": LOSS, "seed": SEED, "calls": CALLS, "batch": BATCH, "scale": SCALE},
            ["main_dino.py"]),
        "how": how,
        "source_commit": f"facebookresearch/dino@{args.commit}",
        "teacher_temps": [float(t) for t in loss_fn.teacher_temp_schedule],
        "losses": losses,
        "centers": centers,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
