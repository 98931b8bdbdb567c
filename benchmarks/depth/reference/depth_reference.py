"""Regenerate benchmarks/depth/fixtures/depth_linear/ from DINOv3's own depth code.

    python benchmarks/depth/reference/depth_reference.py /path/to/dinov3 [--out benchmarks/depth/fixtures/depth_linear]

Runs facebookresearch/dinov3 (commit below) unmodified, outside this repository: its metrics
(metrics.py calculate_depth_metrics with eval.py's post-processing: range, Eigen mask, flip
inverse, bilinear resize, clamp), its linear head (models/linear_head.py LinearHead), the bins
(models/__init__.py FeaturesToDepth), the loss (loss.py MultiLoss / SigLoss), the scheduler
(schedulers.py WarmupOneCycleLR), the NYU crop and Eigen mask boxes (transforms.py NYUCrop,
datasets/datasets_utils.py make_valid_mask) and ColorAug, on seeded random inputs. Writes
inputs.npz (the inputs), reference.json and reference.npz (the official outputs, with
provenance) and MANIFEST.json (their sha256). Only numbers are written; no official code is copied.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

COMMIT = "6876159a11b4df116f30f667f8c9888617df0751"
REPOSITORY = "https://github.com/facebookresearch/dinov3"
OUT = Path(__file__).resolve().parents[1] / "fixtures" / "depth_linear"
FILES = ["dinov3/eval/depth/metrics.py", "dinov3/eval/depth/eval.py", "dinov3/eval/depth/loss.py",
         "dinov3/eval/depth/models/linear_head.py", "dinov3/eval/depth/models/__init__.py",
         "dinov3/eval/depth/schedulers.py", "dinov3/eval/depth/transforms.py",
         "dinov3/eval/depth/datasets/datasets_utils.py", "dinov3/eval/depth/train.py"]


ARRAYS: dict = {}  # official outputs too large for JSON: reference.npz, named in reference.json


def _t(x, name: str | None = None):
    a = torch.as_tensor(x).detach().double().numpy()
    if name is None:
        return a.tolist()
    ARRAYS[name] = a
    return name


def metric_case(official, rng: np.random.Generator, inputs: dict) -> dict:
    """Five images: ground truth 48x64 (10% zeros, some beyond 10 m), a 6x8 prediction and the
    prediction of the flipped image, through eval.py's steps and metrics.py."""
    from dinov3.eval.depth.datasets.datasets_utils import _EvalCropType, make_valid_mask
    from dinov3.eval.depth.metrics import DEPTH_METRICS, calculate_depth_metrics
    from dinov3.eval.depth.transforms import LeftRightFlipAug

    n, lo, hi = 5, 0.001, 10.0
    gt = rng.uniform(0.2, 12.0, size=(n, 1, 48, 64)).astype(np.float32)
    gt[rng.random(gt.shape) < 0.1] = 0.0
    pred = rng.uniform(0.05, 11.0, size=(n, 2, 1, 6, 8)).astype(np.float32)
    inputs.update(metric_gt=gt, metric_pred=pred)
    per_image = []
    for i in range(n):
        g = torch.from_numpy(gt[i:i + 1])
        p = LeftRightFlipAug(flip=True).inverse(torch.from_numpy(pred[i]))
        g = torch.where(torch.logical_or(g >= hi, g <= lo), 0.0, g)
        valid = make_valid_mask(g, eval_crop=_EvalCropType("NYU_EIGEN"), ignored_value=0.0)
        p = torch.nn.functional.interpolate(p, size=g.shape[2:], mode="bilinear", align_corners=False)
        p = p.clamp(min=lo, max=hi)
        values = calculate_depth_metrics(g, p, valid, list_metrics=list(DEPTH_METRICS))
        per_image.append({m.name: float(getattr(values, m.name)) for m in DEPTH_METRICS})
    mean = {k: float(np.nanmean([r[k] for r in per_image])) for k in per_image[0]}
    return {"per_image": per_image, "mean": mean, "min_depth": lo, "max_depth": hi}


def head_case(official, rng: np.random.Generator, inputs: dict, cls_token: bool, layers: int) -> dict:
    """A LinearHead (BatchNorm, 256 bins) + FeaturesToDepth + SigLoss training step on a batch
    of 4 feature maps (32 channels, 6x8) against 48x64 ground truth, then three AdamW steps
    under WarmupOneCycleLR (train.py's order: loss, backward, clip 35, step, scheduler step)."""
    from dinov3.eval.depth.loss import LossType, MultiLoss
    from dinov3.eval.depth.models import FeaturesToDepth
    from dinov3.eval.depth.models.linear_head import LinearHead
    from dinov3.eval.depth.schedulers import build_scheduler

    tag = f"head_cls{int(cls_token)}_l{layers}"
    b, d = 4, 16
    feats = rng.normal(size=(layers, b, d, 6, 8)).astype(np.float32)
    cls = rng.normal(size=(layers, b, d)).astype(np.float32)
    gt = rng.uniform(0.3, 9.5, size=(b, 1, 48, 64)).astype(np.float32)
    gt[rng.random(gt.shape) < 0.15] = 0.0
    torch.manual_seed(7)
    head = LinearHead(in_channels=[d] * layers, n_output_channels=256, use_batchnorm=True, use_cls_token=cls_token)
    head.train()
    # the official init draws N(0, 0.01); perturb the BatchNorm affine so its gradients are not trivial
    with torch.no_grad():
        head.batchnorm_layer.weight.add_(torch.from_numpy(rng.normal(0, 0.1, size=head.channels).astype(np.float32)))
        head.batchnorm_layer.bias.add_(torch.from_numpy(rng.normal(0, 0.1, size=head.channels).astype(np.float32)))
    init = {k: v.detach().numpy().copy() for k, v in head.state_dict().items() if v.dtype.is_floating_point}
    inputs.update({f"{tag}_feats": feats, f"{tag}_cls": cls, f"{tag}_gt": gt,
                   **{f"{tag}_init.{k}": v for k, v in init.items()}})
    to_depth = FeaturesToDepth(min_depth=0.001, max_depth=10.0, bins_strategy="linear", norm_strategy="linear")
    criterion = MultiLoss(dict_losses={LossType.SIGLOSS: 1.0})
    opt = torch.optim.AdamW([{"params": head.parameters(), "lr": 3e-4, "betas": (0.9, 0.99), "weight_decay": 1e-4}])
    sched = build_scheduler("WarmupOneCycleLR", optimizer=opt, lr=3e-4, total_iter=30,
                            constructor_kwargs={"final_div_factor": 1000.0, "warmup_iters": 2,
                                                "base_momentum": 0.85, "max_momentum": 0.95})
    x = [(torch.from_numpy(feats[i]), torch.from_numpy(cls[i])) for i in range(layers)]
    g = torch.from_numpy(gt)
    valid = g != 0
    steps = []
    for step in range(4):
        if step == 3:  # past the loss's warm-up: the variance term joins
            criterion.dict_losses["SIGLOSS"].warm_up_counter = 100
        opt.zero_grad(set_to_none=True)
        depth = to_depth(head(x))
        pred = torch.nn.functional.interpolate(depth, size=g.shape[2:], mode="bilinear", align_corners=False)
        loss = criterion(pred, g, valid)
        loss.backward()
        grads = {n: _t(p.grad, f"{tag}_step{step}_grad.{n}") for n, p in head.named_parameters()}
        torch.nn.utils.clip_grad_norm_(list(head.parameters()), 35.0)
        group = opt.param_groups[0]
        steps.append({"loss": float(loss.detach()), "lr": float(group["lr"]), "beta1": float(group["betas"][0]),
                      "grads": grads, "depth_lowres": _t(depth, f"{tag}_step{step}_depth")})
        opt.step()
        sched.step()
    head.eval()
    final = {"conv_weight": _t(head.conv_depth.weight, f"{tag}_final.conv_weight"),
             "conv_bias": _t(head.conv_depth.bias, f"{tag}_final.conv_bias"),
             "bn_running_mean": _t(head.batchnorm_layer.running_mean, f"{tag}_final.bn_running_mean"),
             "bn_running_var": _t(head.batchnorm_layer.running_var, f"{tag}_final.bn_running_var"),
             "eval_depth_lowres": _t(to_depth(head(x)), f"{tag}_final.eval_depth")}
    return {"tag": tag, "cls_token": cls_token, "layers": layers, "steps": steps, "final": final,
            "schedule": {"total": 30, "warmup": 2, "lr": 3e-4}}


def schedule_case() -> dict:
    from dinov3.eval.depth.schedulers import build_scheduler

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([{"params": [p], "lr": 3e-4, "betas": (0.9, 0.99), "weight_decay": 1e-4}])
    sched = build_scheduler("WarmupOneCycleLR", optimizer=opt, lr=3e-4, total_iter=40,
                            constructor_kwargs={"final_div_factor": 1000.0, "warmup_iters": 12,
                                                "base_momentum": 0.85, "max_momentum": 0.95})
    rows = []
    for _ in range(40):
        rows.append([opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]])
        opt.step()
        sched.step()
    return {"total": 40, "warmup": 12, "lr": 3e-4, "lr_beta1": rows}


def crop_case() -> dict:
    from dinov3.eval.depth.datasets.datasets_utils import _EvalCropType, make_valid_mask
    from dinov3.eval.depth.transforms import NYUCrop

    out = []
    for h, w in [(480, 640), (64, 80), (427, 565), (96, 128)]:
        img = torch.arange(h * w, dtype=torch.float64).reshape(1, h, w)
        c = NYUCrop()(img)
        y1, x1 = divmod(int(c[0, 0, 0]), w)
        mask = make_valid_mask(torch.ones(1, 1, h, w), eval_crop=_EvalCropType("NYU_EIGEN"))[0, 0]
        rows, cols = torch.nonzero(mask.any(1))[:, 0], torch.nonzero(mask.any(0))[:, 0]
        out.append({"hw": [h, w], "nyu_crop": [y1, y1 + c.shape[1], x1, x1 + c.shape[2]],
                    "eigen": [int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1]})
    return {"sizes": out}


def colour_case(inputs: dict) -> dict:
    from dinov3.eval.depth.transforms import ColorAug

    img = np.random.default_rng(3).random((3, 8, 10)).astype(np.float32)
    inputs["colour_img"] = img
    np.random.seed(11)
    out = ColorAug(prob=1.0, brightness_range=(0.75, 1.25))(torch.from_numpy(img))
    np.random.seed(11)
    draws = [float(np.random.rand()), float(np.random.uniform(0.9, 1.1)), float(np.random.uniform(0.75, 1.25)),
             *map(float, np.random.uniform(0.9, 1.1, size=3))]
    return {"draws_p_gamma_brightness_rgb": draws, "out": _t(out)}


def official_on_path(root: Path) -> None:
    """Make the dinov3 checkout at ``root`` importable: this script's one change of the import
    path (a sanctioned exception, tests/test_import_path.py)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dinov3", type=Path, help=f"a checkout of {REPOSITORY} (commit {COMMIT})")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--commit", default=None, help="the checkout's commit when it is not a git work tree")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    official_on_path(args.dinov3.resolve())
    commit = args.commit
    if commit is None:
        try:
            commit = subprocess.check_output(["git", "-C", str(args.dinov3), "rev-parse", "HEAD"], text=True,
                                             stderr=subprocess.DEVNULL).strip()
        except (OSError, subprocess.CalledProcessError):
            commit = COMMIT
    rng = np.random.default_rng(2025)
    inputs: dict = {}
    ref = {"metrics": metric_case(None, rng, inputs),
           "heads": [head_case(None, rng, inputs, False, 1), head_case(None, rng, inputs, True, 4)],
           "schedule": schedule_case(), "crops": crop_case(), "colour": colour_case(inputs)}
    ref["provenance"] = {
        "repository": REPOSITORY, "commit": commit,
        "official_files": {f: hashlib.sha1((args.dinov3 / f).read_bytes()).hexdigest() for f in FILES},
        "generator": "benchmarks/depth/reference/depth_reference.py",
        "command": "python benchmarks/depth/reference/depth_reference.py DINOV3_CHECKOUT",
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                        "platform": platform.platform(), "torch_threads": torch.get_num_threads(),
                        "date": datetime.date.today().isoformat()}}
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out / "inputs.npz", **inputs)
    np.savez_compressed(args.out / "reference.npz", **ARRAYS)
    (args.out / "reference.json").write_text(json.dumps(ref, indent=1))
    manifest = {name: _sha256(args.out / name) for name in ("inputs.npz", "reference.npz", "reference.json")}
    (args.out / "MANIFEST.json").write_text(json.dumps({"sha256": manifest, "provenance": ref["provenance"]}, indent=1))
    print(f"wrote {args.out}: {manifest}")


if __name__ == "__main__":
    main()
