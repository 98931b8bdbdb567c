"""Regenerate tests/fixtures/ibot_loss.json from the official iBOT code.

Runs bytedance/ibot main_ibot.iBOTLoss unmodified (one-process gloo group: its centre updates
all-reduce) on seeded random [CLS] / patch outputs and masks, four calls per case with
epoch = call. Stubbed: tensorboardX and evaluation.unsupervised.unsup_cls (imported by
main_ibot.py for logging and clustering evaluation, unused by the loss).
"""
from __future__ import annotations

import common

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "ibot_loss.json"
LOSS = dict(out_dim=32, patch_out_dim=32, ngcrops=2, nlcrops=3, warmup_teacher_temp=0.04, teacher_temp=0.06,
            warmup_teacher_temp2=0.04, teacher_temp2=0.07, warmup_teacher_temp_epochs=3, nepochs=6,
            student_temp=0.1, center_momentum=0.9, center_momentum2=0.9)
CASES = [dict(seed=0, lambda1=1.0, lambda2=1.0, mim_start_epoch=0),
         dict(seed=1, lambda1=0.5, lambda2=2.0, mim_start_epoch=1)]
CALLS, BATCH, PATCHES, MASK_GRID, MASK_P, SCALE = 4, 4, 12, (3, 4), 0.4, 3.0


def run_case(main_ibot, case: dict) -> dict:
    import torch

    fn = main_ibot.iBOTLoss(**LOSS, lambda1=case["lambda1"], lambda2=case["lambda2"],
                            mim_start_epoch=case["mim_start_epoch"])
    ng, nl, d = LOSS["ngcrops"], LOSS["nlcrops"], LOSS["out_dim"]
    torch.manual_seed(case["seed"])
    calls = []
    for c in range(CALLS):
        s_cls = torch.randn(ng * BATCH, d) * SCALE
        s_patch = torch.randn(ng * BATCH, PATCHES, d) * SCALE
        t_cls = torch.randn(ng * BATCH, d) * SCALE
        t_patch = torch.randn(ng * BATCH, PATCHES, d) * SCALE
        s_local = torch.randn(nl * BATCH, d) * SCALE
        masks = [torch.rand(BATCH, *MASK_GRID) < MASK_P for _ in range(ng)]
        masks[0][0] = False  # an image without masked patches
        out = fn((s_cls, s_patch), (t_cls, t_patch), s_local, masks, c)
        calls.append({**{k: float(out[k]) for k in ("cls", "patch", "loss")},
                      "center": fn.center.flatten().tolist(), "center2": fn.center2.flatten().tolist()})
    return {**case, "teacher_temps": [float(t) for t in fn.teacher_temp_schedule],
            "teacher_patch_temps": [float(t) for t in fn.teacher_temp2_schedule], "calls": calls}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    main_ibot = common.import_official(
        args.official, "main_ibot",
        stubs={"tensorboardX": {"SummaryWriter": None}, "evaluation.unsupervised.unsup_cls": {"eval_pred": None}})
    common.init_gloo()
    how = (f"bytedance/ibot@{args.commit} main_ibot.iBOTLoss("
           + ", ".join(f"{k}={v}" for k, v in LOSS.items())
           + ", lambda1=L1, lambda2=L2, mim_start_epoch=S) run unmodified (gloo, world size 1). Per case: "
             "torch.manual_seed(seed); for call c in 0..3 (epoch=c): s_cls=randn(2*4,32)*3, "
             "s_patch=randn(2*4,12,32)*3, "
             "t_cls=randn(2*4,32)*3, t_patch=randn(2*4,12,32)*3, s_local=randn(3*4,32)*3, masks=[rand(4,3,4)<0.4 for "
             "2 globals] with masks[0][0] all False; loss((s_cls, s_patch), (t_cls, t_patch), s_local, masks, c) -> "
             "cls, patch, loss; centres after each call (center (1,32), center2 (1,1,32) flattened).")
    data = {
        "provenance": common.provenance(
            args, __file__, {"iBOTLoss": LOSS, "cases": CASES, "calls": CALLS, "batch": BATCH, "patches": PATCHES,
                             "mask_grid": list(MASK_GRID), "mask_p": MASK_P, "scale": SCALE},
            ["main_ibot.py"]),
        "how": how,
        "cases": [run_case(main_ibot, c) for c in CASES],
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
