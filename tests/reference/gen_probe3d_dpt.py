"""Regenerate tests/fixtures/probe3d_dpt.json (and its inputs, probe3d_dpt_inputs.npz) from
Probe3D's own probe, loss, metric and schedule code.

Runs mbanani/probe3d unmodified on seeded float inputs it writes beside the fixture (the test feeds
the stored inputs, never recomputing them):

- ``evals.models.probes.SurfaceNormalHead`` (head_type dpt, uncertainty_aware, hidden_dim 8,
  kernel_size 3) on four random (2, 6, 3, 4) maps, its weights from torch.manual_seed(0) (stored);
  the output resized to 44 x 52 by bicubic interpolation with corners aligned, as train_snorm.py
  does; ``evals.utils.losses.angular_loss`` (uncertainty-aware, and on the first three channels
  without) and ``evals.utils.metrics.evaluate_surface_norm`` on it against random unit normals
  with a random validity mask (one image with no valid pixel);
- ``evals.models.probes.DepthHead`` (dpt, bindepth, 256 bins over 0.001-10 m) on the same maps,
  bilinear resize as train_depth.py, ``evals.utils.losses.DepthLoss`` and
  ``evals.utils.metrics.evaluate_depth`` (plain and scale_invariant) against random depth (some
  pixels 0, some beyond 10 m);
- ``evals.utils.optim.cosine_decay_linear_warmup`` (100 steps, 15 of warm-up) and
  ``evals.models.utils.center_padding`` on a few shapes;
- training end to end: ``train_snorm.train`` and ``train_depth.train`` (2 epochs of 3 batches of 2,
  detach_model, AdamW lr 5e-4 under LambdaLR with cosine_decay_linear_warmup over 6 steps, 1.5
  epochs of warm-up, as train_model builds them) on stored features through a stand-in model that
  returns them, from the stored initial weights; then ``validate`` (aggregate False) on the same
  batches (depth: also with scale_invariant, as train_model's second pass): each step's loss and lr,
  the trained probe's output, the per-image metrics.

Substituted: ``loguru`` (imported by metrics.py for a warning of depth_rmse, which is not run) and
the transformers MAE helper evals/models/utils.py imports (only center_padding runs) are stubbed;
``torch.Tensor.cuda`` is the identity and ``rank`` is "cpu" (a CPU run; rank "cpu" also skips the
progress bar); ``angular_loss`` in train_snorm, the depth loss and ``optimizer.step`` are wrapped to
record each step's loss and lr. Needs hydra-core, omegaconf, loguru, einops (imported by the
official training scripts).
"""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np

import common

REPOSITORY = "https://github.com/mbanani/probe3d"
COMMIT = "a1f14640076e38b8bc07b66d0fe2d01d15691e9d"
FIXTURE = "probe3d_dpt.json"
INPUTS = "probe3d_dpt_inputs.npz"
DIMS, GRID, TARGET, HIDDEN = 6, (3, 4), (44, 52), 8
SAMPLES = 256  # output values recorded at fixed flat positions (plus sums)


def make_inputs(torch) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(4, 2, DIMS, *GRID, generator=g)
    normals = torch.nn.functional.normalize(torch.randn(2, 3, *TARGET, generator=g), dim=1)
    valid = torch.rand(2, 1, *TARGET, generator=g) > 0.3
    valid[1] = False
    depth = torch.rand(2, 1, *TARGET, generator=g) * 12.0
    depth[torch.rand(2, 1, *TARGET, generator=g) < 0.2] = 0.0
    return {"feats": feats.numpy(), "normals": normals.numpy(), "valid": valid.numpy(), "depth": depth.numpy()}


def sampled(t, torch) -> dict:
    flat = t.detach().double().flatten()
    idx = torch.linspace(0, flat.numel() - 1, SAMPLES).round().long()
    return {"shape": list(t.shape), "sum": float(flat.sum()), "sum_sq": float((flat ** 2).sum()),
            "index": idx.tolist(), "values": flat[idx].tolist()}


def run_normals(probes, losses, metrics, torch, x, state) -> tuple[dict, dict]:
    F = torch.nn.functional
    torch.manual_seed(0)
    head = probes.SurfaceNormalHead([DIMS] * 4, head_type="dpt", uncertainty_aware=True, hidden_dim=HIDDEN,
                                    kernel_size=3)
    state["normals"] = {k: v.numpy().copy() for k, v in head.head.state_dict().items()}
    feats = [torch.tensor(f) for f in x["feats"]]
    raw = head(list(feats))
    pred = F.interpolate(raw, size=TARGET, mode="bicubic", align_corners=True)
    normals, valid = torch.tensor(x["normals"]), torch.tensor(x["valid"])
    out = {"raw": sampled(raw, torch), "pred": sampled(pred, torch),
           "loss_uncertainty": float(losses.angular_loss(pred, normals, valid, uncertainty_aware=True)),
           "loss_plain": float(losses.angular_loss(pred[:, :3], normals, valid, uncertainty_aware=False)),
           "metrics": {k: v.double().tolist() for k, v in metrics.evaluate_surface_norm(pred, normals, valid).items()}}
    return out, {"pred": pred.detach().numpy()}


def run_depth(probes, losses, metrics, torch, x, state) -> dict:
    F = torch.nn.functional
    torch.manual_seed(0)
    head = probes.DepthHead([DIMS] * 4, head_type="dpt", min_depth=0.001, max_depth=10, prediction_type="bindepth",
                            hidden_dim=HIDDEN, kernel_size=3)
    state["depth"] = {k: v.numpy().copy() for k, v in head.head.state_dict().items()}
    raw = head([torch.tensor(f) for f in x["feats"]])
    pred = F.interpolate(raw, size=TARGET, mode="bilinear", align_corners=True)
    target = torch.tensor(x["depth"])
    loss = losses.DepthLoss()(pred, target.clone())
    state["depth_pred"] = pred.detach().numpy().copy()
    return {"raw": sampled(raw, torch), "pred": sampled(pred, torch), "loss": float(loss),
            "metrics": {k: v.double().tolist() for k, v in metrics.evaluate_depth(pred, target.clone()).items()},
            "metrics_aligned": {k: v.double().tolist() for k, v in metrics.evaluate_depth(
                pred, target.clone(), scale_invariant=True).items()}}


N_BATCHES, EPOCHS = 3, 2


def make_train_inputs(torch) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(2)
    feats = torch.randn(N_BATCHES, 4, 2, DIMS, *GRID, generator=g)
    normals = torch.nn.functional.normalize(torch.randn(N_BATCHES, 2, 3, *TARGET, generator=g), dim=2)
    depth = 0.5 + torch.rand(N_BATCHES, 2, 1, *TARGET, generator=g) * 9.0
    depth[torch.rand(N_BATCHES, 2, 1, *TARGET, generator=g) < 0.2] = 0.0
    return {"train_feats": feats.numpy(), "train_normals": normals.numpy(), "train_depth": depth.numpy()}


class StandIn:
    """A frozen model whose "images" are batch indices: it returns that batch's stored four maps."""

    def __init__(self, torch, feats):
        self.feats = torch.tensor(feats)

    def __call__(self, images):
        return [f for f in self.feats[int(images[0])]]


def run_training(script, head, loss_name, torch, optim, t, extra_args=()) -> dict:
    batches = [{"image": torch.full((2,), float(b)), "depth": torch.tensor(t["train_depth"][b]),
                "snorm": torch.tensor(t["train_normals"][b])} for b in range(N_BATCHES)]
    opt = torch.optim.AdamW([{"params": head.parameters(), "lr": 5e-4}])
    total, warmup = EPOCHS * N_BATCHES, 1.5 * N_BATCHES
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=lambda e: optim.cosine_decay_linear_warmup(
        e, total, warmup))
    lrs, losses, extra = [], [], {}
    step = opt.step
    opt.step = lambda *a, **k: (lrs.append(opt.param_groups[0]["lr"]), step(*a, **k))[1]
    model = StandIn(torch, t["train_feats"])
    if loss_name == "angular_loss":
        original = script.angular_loss
        script.angular_loss = lambda *a, **k: (lambda v: (losses.append(float(v)), v)[1])(original(*a, **k))
        script.train(model, head, batches, opt, sched, EPOCHS, True, rank="cpu")
        script.angular_loss = original
        val_loss, val = script.validate(model, head, batches, verbose=False, aggregate=False)
    else:
        loss_fn = extra_args[0]
        record = lambda p, g: (lambda v: (losses.append(float(v)), v)[1])(loss_fn(p, g))  # noqa: E731
        script.train(model, head, batches, opt, sched, EPOCHS, True, record, rank="cpu")
        val_loss, val = script.validate(model, head, batches, loss_fn, verbose=False, aggregate=False)
        _, aligned = script.validate(model, head, batches, loss_fn, verbose=False, scale_invariant=True,
                                     aggregate=False)
        extra = {"val_metrics_aligned": {k: v.double().tolist() for k, v in aligned.items()}}
    with torch.no_grad():
        out = head([f for f in torch.tensor(t["train_feats"][0])])
    return {"lr": lrs, "loss": losses, "trained_output": sampled(out, torch), "val_loss": float(val_loss),
            "val_metrics": {k: v.double().tolist() for k, v in val.items()}, **extra}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import torch

    torch.set_num_threads(args.threads)
    loguru = {"logger": types.SimpleNamespace(warning=print, info=print)}
    probes = common.import_official(args.official, "evals.models.probes")
    losses = common.import_official(args.official, "evals.utils.losses")
    metrics = common.import_official(args.official, "evals.utils.metrics", stubs={"loguru": loguru})
    optim = common.import_official(args.official, "evals.utils.optim")
    mutils = common.import_official(args.official, "evals.models.utils", stubs={
        "transformers.models.vit_mae.modeling_vit_mae": {"get_2d_sincos_pos_embed_from_grid": None}})
    torch.Tensor.cuda = lambda self, *a, **k: self  # CPU run
    train_snorm = common.import_official(args.official, "train_snorm")
    train_depth = common.import_official(args.official, "train_depth")
    x = make_inputs(torch)
    state: dict = {}
    normals, extra = run_normals(probes, losses, metrics, torch, x, state)
    depth = run_depth(probes, losses, metrics, torch, x, state)
    t = make_train_inputs(torch)
    torch.manual_seed(0)
    head = probes.SurfaceNormalHead([DIMS] * 4, head_type="dpt", uncertainty_aware=True, hidden_dim=HIDDEN,
                                    kernel_size=3)
    training = {"normals": run_training(train_snorm, head, "angular_loss", torch, optim, t)}
    torch.manual_seed(0)
    head = probes.DepthHead([DIMS] * 4, head_type="dpt", min_depth=0.001, max_depth=10, prediction_type="bindepth",
                            hidden_dim=HIDDEN, kernel_size=3)
    training["depth"] = run_training(train_depth, head, "depth", torch, optim, t, (losses.DepthLoss(),))
    schedule = [float(optim.cosine_decay_linear_warmup(s, 100, 15)) for s in range(0, 101, 5)]
    shapes = [(48, 64), (44, 64), (48, 60), (45, 61)]
    padding = [list(mutils.center_padding(torch.zeros(1, 1, *s), 16).shape[-2:]) for s in shapes]
    inputs = {**x, **t, "normals_pred": extra["pred"], "depth_pred": state["depth_pred"],
              **{f"normals_head.{k}": v for k, v in state["normals"].items()},
              **{f"depth_head.{k}": v for k, v in state["depth"].items()}}  # the official predictions too
    np.savez_compressed(Path(args.out).with_name(INPUTS), **inputs)
    data = {
        "provenance": common.provenance(
            args, __file__, {"dims": DIMS, "grid": list(GRID), "target": list(TARGET), "hidden_dim": HIDDEN,
                             "kernel_size": 3, "head_type": "dpt", "uncertainty_aware": True, "n_bins": 256,
                             "min_depth": 0.001, "max_depth": 10, "schedule": [100, 15], "inputs_seed": 1,
                             "init_seed": 0, "inputs": INPUTS, "train_batches": N_BATCHES, "train_epochs": EPOCHS,
                             "train_batch_size": 2, "probe_lr": 5e-4, "warmup_epochs": 1.5, "train_inputs_seed": 2},
            common.loaded_official_files(args.official),
            notes="loguru and the transformers MAE helper stubbed (unused by the functions run); Tensor.cuda "
                  "identity, rank 'cpu'; the training losses and optimizer.step wrapped to record loss and lr"),
        "how": "official probe heads, losses, metrics, schedule and padding on the stored inputs",
        "normals": normals, "depth": depth,
        "schedule": {"steps": list(range(0, 101, 5)), "factor": schedule},
        "training": training,
        "center_padding": {"patch": 16, "shapes": [list(s) for s in shapes], "padded": padding},
    }
    common.compare_with_committed(data, args.out)
    common.write_fixture(args.out, data)


if __name__ == "__main__":
    main()
