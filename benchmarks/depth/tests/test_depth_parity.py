"""depth_linear against DINOv3's own depth code (benchmarks/depth/fixtures/depth_linear/, written by
benchmarks/depth/reference/depth_reference.py from facebookresearch/dinov3 @ 6876159 on seeded inputs):
the metrics after eval.py's post-processing, the head's training steps (loss, gradients, the
schedule's lr and beta1, the weights after AdamW, BatchNorm statistics), the crop boxes and the
colour augmentation."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.depth.head import LinearDepthHead, SILogLoss, logits_to_depth, set_schedule, warmup_one_cycle
from benchmarks.depth.metrics import OFFICIAL_NAMES, eigen_box, evaluate_prediction
from benchmarks.depth.transforms import colour_aug, nyu_crop_box

FIX = Path(__file__).parent.parent / "fixtures" / "depth_linear"


@pytest.fixture(scope="module")
def ref():
    manifest = json.loads((FIX / "MANIFEST.json").read_text())
    for name, sha in manifest["sha256"].items():
        assert hashlib.sha256((FIX / name).read_bytes()).hexdigest() == sha, f"{name} changed since its manifest"
    data = json.loads((FIX / "reference.json").read_text())
    assert data["provenance"]["commit"] == "6876159a11b4df116f30f667f8c9888617df0751"
    return data, np.load(FIX / "inputs.npz"), np.load(FIX / "reference.npz")


def test_metrics_match_dinov3_per_image_and_mean(ref):
    data, inputs, _ = ref
    case = data["metrics"]
    gt, pred = inputs["metric_gt"], inputs["metric_pred"]
    rows = []
    for i in range(gt.shape[0]):
        p = torch.from_numpy(pred[i])
        p = (p[:1] + p[1:].flip(-1)) / 2  # the flip's inverse, as the protocol averages it
        mine = evaluate_prediction(p, torch.from_numpy(gt[i:i + 1]), min_depth=case["min_depth"],
                                   max_depth=case["max_depth"], eval_mask="nyu_eigen")
        rows.append(mine)
        for name, official in OFFICIAL_NAMES.items():
            want = case["per_image"][i][official]
            # float32 sums: other CPU kernels round the last bits differently (1e-6 relative)
            assert mine[name] == pytest.approx(want, rel=1e-6, abs=1e-6), (i, name)
    for name, official in OFFICIAL_NAMES.items():
        assert np.mean([r[name] for r in rows]) == pytest.approx(case["mean"][official], rel=1e-6, abs=1e-6)


def _my_head(inputs, tag, layers, cls_token):
    d = inputs[f"{tag}_feats"].shape[2]
    head = LinearDepthHead([d] * layers, 256, batchnorm=True, cls_token=cls_token)
    rename = {"batchnorm_layer.": "bn.", "conv_depth.": "conv."}
    state = {}
    for key in inputs.files:
        if key.startswith(f"{tag}_init."):
            k = key[len(tag) + 6:]
            for a, b in rename.items():
                k = k.replace(a, b)
            state[k] = torch.from_numpy(inputs[key])
    missing = head.load_state_dict(state, strict=False)
    assert set(missing.missing_keys) <= {"bn.num_batches_tracked"} and not missing.unexpected_keys
    return head


@pytest.mark.parametrize("which", [0, 1], ids=["dinov3_last_layer", "cls_token_4_layers"])
def test_head_training_steps_match_dinov3(ref, which):
    data, inputs, arrays = ref
    case = data["heads"][which]
    tag, layers, cls_token = case["tag"], case["layers"], case["cls_token"]
    head = _my_head(inputs, tag, layers, cls_token)
    head.train()
    feats, cls = torch.from_numpy(inputs[f"{tag}_feats"]), torch.from_numpy(inputs[f"{tag}_cls"])
    gt = torch.from_numpy(inputs[f"{tag}_gt"])
    patches, tokens = [feats[i] for i in range(layers)], [cls[i] for i in range(layers)]
    opt = torch.optim.AdamW(head.parameters(), lr=3e-4, betas=(0.95, 0.99), weight_decay=1e-4)
    loss_fn = SILogLoss(0.15, warm_iter=100)
    sched = case["schedule"]
    names = {"bn.weight": "batchnorm_layer.weight", "bn.bias": "batchnorm_layer.bias",
             "conv.weight": "conv_depth.weight", "conv.bias": "conv_depth.bias"}
    worst = 0.0
    for step, want in enumerate(case["steps"]):
        if step == 3:
            loss_fn.calls = 100
        lr, beta1 = warmup_one_cycle(step, sched["lr"], sched["total"], sched["warmup"])
        assert lr == pytest.approx(want["lr"], rel=1e-9) and beta1 == pytest.approx(want["beta1"], abs=1e-12)
        set_schedule(opt, lr, beta1)
        opt.zero_grad(set_to_none=True)
        depth = logits_to_depth(head(patches, tokens), 0.001, 10.0)
        np.testing.assert_allclose(depth.detach().numpy(), arrays[want["depth_lowres"]], rtol=0, atol=1e-5)
        pred = torch.nn.functional.interpolate(depth, size=gt.shape[2:], mode="bilinear", align_corners=False)
        loss = loss_fn(pred, gt, gt != 0)
        assert float(loss.detach()) == pytest.approx(want["loss"], abs=1e-5), step
        loss.backward()
        for mine, theirs in names.items():
            g = dict(head.named_parameters())[mine].grad.numpy()
            diff = np.abs(g - arrays[want["grads"][theirs]]).max()
            worst = max(worst, diff)
            assert diff <= 1e-5, (step, mine, diff)
        torch.nn.utils.clip_grad_norm_(list(head.parameters()), 35.0)
        opt.step()
    final = case["final"]
    np.testing.assert_allclose(head.conv.weight.detach().numpy(), arrays[final["conv_weight"]], atol=1e-6)
    np.testing.assert_allclose(head.bn.running_mean.numpy(), arrays[final["bn_running_mean"]], atol=1e-6)
    np.testing.assert_allclose(head.bn.running_var.numpy(), arrays[final["bn_running_var"]], atol=1e-5)
    head.eval()
    with torch.no_grad():
        depth = logits_to_depth(head(patches, tokens), 0.001, 10.0)
    np.testing.assert_allclose(depth.numpy(), arrays[final["eval_depth_lowres"]], atol=1e-5)


def test_warmup_one_cycle_matches_dinov3(ref):
    case = ref[0]["schedule"]
    for step, (lr, beta1) in enumerate(case["lr_beta1"]):
        mine = warmup_one_cycle(step, case["lr"], case["total"], case["warmup"])
        assert mine[0] == pytest.approx(lr, rel=1e-9) and mine[1] == pytest.approx(beta1, abs=1e-12), step


def test_nyu_crop_and_eigen_boxes_match_dinov3(ref):
    for row in ref[0]["crops"]["sizes"]:
        h, w = row["hw"]
        assert list(nyu_crop_box(h, w)) == row["nyu_crop"]
        assert list(eigen_box(h, w)) == row["eigen"]


class _Draws:
    """A stand-in Generator replaying the official draws (gamma, brightness, colours)."""

    def __init__(self, values):
        self.values = list(values)

    def uniform(self, lo, hi, size=None):
        if size is None:
            return self.values.pop(0)
        out, self.values = np.array(self.values[:size]), self.values[size:]
        return out


def test_colour_augmentation_matches_dinov3(ref):
    data, inputs, _ = ref
    case = data["colour"]
    draws = case["draws_p_gamma_brightness_rgb"][1:]  # the first draw is ColorAug's coin (prob 1)
    out = colour_aug(torch.from_numpy(inputs["colour_img"]), _Draws(draws))
    np.testing.assert_allclose(out.numpy(), np.asarray(case["out"]), atol=2e-6)
