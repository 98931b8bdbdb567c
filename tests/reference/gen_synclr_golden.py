"""Regenerate tests/fixtures/synclr_golden.json from the official SynCLR code.

Runs google-research/syn-rep-learn SynCLR/train_pytorch models/mask_losses.py
(SupConMomentumLoss, iBOTPatchLoss.sinkhorn_knopp_teacher + forward_masked,
DINOLoss.sinkhorn_knopp_teacher) and models/head.py (MLPHead) unmodified, in a one-process
gloo group. --official is the repository root; the code lives in SynCLR/train_pytorch.

Stubbed: torch._six (util/misc.py imports ``inf`` from it; the module is gone from torch 2).
xformers must NOT be installed: mask_losses.py then uses its plain-torch cross-entropy
(``lossfunc``), the one these numbers are made with (the environment records its absence).
MLPHead's SyncBatchNorm layers (mlp_norm='bn') are swapped for BatchNorm1d with the same
settings and state, to run on the CPU.
"""
from __future__ import annotations

import math

import common
from test_methods_shared import seed_named_tensors  # the tests' seeded head weights

REPOSITORY = "https://github.com/google-research/syn-rep-learn"
COMMIT = "45f451b0d53d25eecdb4d7b9e5a852e1c43e7f5b"
FIXTURE = "synclr_golden.json"
CODE = "SynCLR/train_pytorch"
FEATURE_DIM = 16
CONTRASTIVE = [dict(seed=0, bs=3, n_img=2, n_local=2, temperature=0.08, avoid_local_global_same=False),
               dict(seed=1, bs=3, n_img=2, n_local=1, temperature=0.1, avoid_local_global_same=True),
               dict(seed=2, bs=2, n_img=3, n_local=2, temperature=0.08, avoid_local_global_same=False)]
SINKHORN = [dict(seed=3, n=20, K=12, temp=0.05), dict(seed=4, n=7, K=30, temp=0.07)]
SINKHORN_ITERS = 3
IBOT = dict(seed=5, images=6, patches=16, dim=24, masked_per_row=[8, 5, 11], teacher_temp=0.06, n_masked_samples=3,
            global_crops_number=1)
HEADS = [dict(norm="ln", num_layers=3, input_dim=8), dict(norm="ln", num_layers=2, input_dim=6),
         dict(norm="bn", num_layers=3, input_dim=8), dict(norm="bn", num_layers=2, input_dim=6)]
HEAD_DIMS = dict(mlp_dim=10, output_dim=6)
HEAD_PARAM_SEED, HEAD_INPUT_SEED, HEAD_BATCH = 6, 7, 5

CONTRASTIVE_HOW = ("SupConMomentumLoss(temperature, avoid_local_global_same); torch.manual_seed(seed); q = "
                   "randn(bs*n_img*(1+n_local), 16) (global rows first, then local rows in collate order: local "
                   "position p = view*n_local + c major, caption minor); k = randn(bs*n_img, 16); caption ids "
                   "arange(bs)*7+3, teacher labels ids.repeat(n_img), student labels cat(teacher labels, "
                   "ids.repeat(n_img*n_local)).")
SINKHORN_HOW = ("torch.manual_seed(seed); logits = randn(n, K); iBOTPatchLoss(K).sinkhorn_knopp_teacher(logits, temp, "
                "tensor([n]), 3) and DINOLoss(K).sinkhorn_knopp_teacher(logits, temp, 3)")
IBOT_HOW = ("torch.manual_seed(5); masks (6, 16) bool zeros, rows 0..2 get randperm(16)[:8|5|11] True; teacher_tokens "
            "= "
            "randn(6,16,24); student_tokens = randn(6,16,24); tokens at masks.flatten().nonzero() -> "
            "iBOTPatchLoss(24).sinkhorn_knopp_teacher(teacher, 0.06, n_masked, 3); forward_masked(student, targets, "
            "masks, n_masked, None, n_masked_samples=3) / global_crops_number (1)")
HEADS_HOW = ("models.head.MLPHead(num_layers, input_dim, mlp_dim=10, output_dim=6, mlp_norm) train mode; "
             "params/buffers "
             "(sorted names) torch.manual_seed(6): randn*0.5, running stats 0/1; x: torch.manual_seed(7) randn(5, "
             "input_dim). For bn, SyncBatchNorm layers swapped for BatchNorm1d with the same state (CPU).")


def contrastive(losses, case: dict) -> dict:
    import torch

    torch.manual_seed(case["seed"])
    n_g = case["bs"] * case["n_img"]
    q = torch.randn(n_g * (1 + case["n_local"]), FEATURE_DIM)
    k = torch.randn(n_g, FEATURE_DIM)
    ids = torch.arange(case["bs"]).long() * 7 + 3
    t_lab = ids.repeat(case["n_img"])
    s_lab = torch.cat([t_lab, ids.repeat(case["n_img"] * case["n_local"])])
    fn = losses.SupConMomentumLoss(temperature=case["temperature"],
                                   avoid_local_global_same=case["avoid_local_global_same"])
    out = fn({"student_contrast_cls": q, "teacher_contrast_cls": k, "student_labels": s_lab, "teacher_labels": t_lab})
    return {"how": CONTRASTIVE_HOW, **case, "global": float(out["global_crop_contrast_loss"]),
            "local": float(out["local_crop_contrast_loss"]), "total": float(out["total_contrast_loss"])}


def sinkhorn(losses, case: dict) -> dict:
    import torch

    torch.manual_seed(case["seed"])
    logits = torch.randn(case["n"], case["K"])
    n_tensor = torch.full((1,), case["n"], dtype=torch.long)  # as dataset/collate.py builds n_masked_patches
    ibot = losses.iBOTPatchLoss(case["K"]).sinkhorn_knopp_teacher(logits, case["temp"], n_tensor, SINKHORN_ITERS)
    dino = losses.DINOLoss(case["K"]).sinkhorn_knopp_teacher(logits, case["temp"], SINKHORN_ITERS)
    return {"how": SINKHORN_HOW, **case, "ibot_targets": ibot.tolist(), "dino_targets": dino.tolist()}


def ibot(losses) -> dict:
    import torch

    c = IBOT
    torch.manual_seed(c["seed"])
    masks = torch.zeros(c["images"], c["patches"], dtype=torch.bool)
    for i, n in enumerate(c["masked_per_row"]):
        masks[i, torch.randperm(c["patches"])[:n]] = True
    teacher = torch.randn(c["images"], c["patches"], c["dim"])
    student = torch.randn(c["images"], c["patches"], c["dim"])
    idx = masks.flatten().nonzero().flatten()
    n_masked = idx.numel()
    fn = losses.iBOTPatchLoss(c["dim"])
    targets = fn.sinkhorn_knopp_teacher(teacher.flatten(0, 1)[idx], c["teacher_temp"],
                                        torch.full((1,), n_masked, dtype=torch.long), SINKHORN_ITERS)
    loss = fn.forward_masked(student.flatten(0, 1)[idx], targets, student_masks_flat=masks,
                             n_masked_patches=n_masked, masks_weight=None,
                             n_masked_samples=c["n_masked_samples"]) / c["global_crops_number"]
    return {"how": IBOT_HOW, "loss": float(loss), "n_masked": n_masked}


def head(head_mod, case: dict) -> dict:
    import torch
    from torch import nn

    mlp = head_mod.MLPHead(case["num_layers"], case["input_dim"], HEAD_DIMS["mlp_dim"], HEAD_DIMS["output_dim"],
                           mlp_norm=case["norm"])
    named = dict(mlp.named_parameters())
    named.update(dict(mlp.named_buffers()))
    seed_named_tensors(named, HEAD_PARAM_SEED)
    for i, layer in enumerate(mlp.mlp):
        if isinstance(layer, nn.SyncBatchNorm):
            bn = nn.BatchNorm1d(layer.num_features, eps=layer.eps, momentum=layer.momentum, affine=layer.affine,
                                track_running_stats=layer.track_running_stats)
            bn.load_state_dict(layer.state_dict())
            mlp.mlp[i] = bn
    mlp.train()
    torch.manual_seed(HEAD_INPUT_SEED)
    y = mlp(torch.randn(HEAD_BATCH, case["input_dim"]))
    return {"how": HEADS_HOW, **case, "names": sorted(named), "output": y.detach().tolist()}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    code = args.official / CODE
    stubs = {"torch._six": {"inf": math.inf}}
    losses = common.import_official(code, "models.mask_losses", stubs=stubs)
    head_mod = common.import_official(code, "models.head")
    try:
        import xformers  # noqa: F401
        raise SystemExit("xformers is installed: mask_losses.py would use its cross-entropy; run without it")
    except ImportError:
        pass
    common.init_gloo()
    data = {
        "provenance": common.provenance(
            args, __file__,
            {"contrastive": CONTRASTIVE, "feature_dim": FEATURE_DIM, "sinkhorn": SINKHORN,
             "sinkhorn_iterations": SINKHORN_ITERS, "ibot": IBOT, "heads": HEADS, "head_dims": HEAD_DIMS,
             "head_param_seed": HEAD_PARAM_SEED, "head_input_seed": HEAD_INPUT_SEED, "head_batch": HEAD_BATCH,
             "xformers": "absent (mask_losses.lossfunc is the plain-torch cross-entropy)"},
            [f"{CODE}/models/mask_losses.py", f"{CODE}/models/head.py", f"{CODE}/util/misc.py"]),
        "how": (f"google-research/syn-rep-learn@{args.commit} SynCLR/train_pytorch models/mask_losses.py and "
                "models/head.py run unmodified (gloo process group, world size 1; torch._six stubbed) by "
                "tests/reference/gen_synclr_golden.py. See each case's 'how'."),
        "contrastive": [contrastive(losses, c) for c in CONTRASTIVE],
        "sinkhorn": [sinkhorn(losses, c) for c in SINKHORN],
        "ibot": ibot(losses),
        "heads": [head(head_mod, c) for c in HEADS],
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
