"""The detection protocol end to end on SynthScenes (mmdet), and its evaluation path against
pycocotools' COCOeval on identical predictions; the built detector against the official config's
numbers. Slow: each imports mmdet (about 10 s) and the first trains a detector."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.detection.synthetic import generate
from harness.models.handle import ModelHandle
from harness.protocol_info import build_protocol

FIXTURE = Path(__file__).resolve().parents[1] / "parity" / "official_ibot_detection.json"


@pytest.fixture(autouse=True)
def mm_stack():
    """Skip without mmdet / pycocotools; imported here, not at collection (the fast run collects this file)."""
    pytest.importorskip("mmdet")
    pytest.importorskip("pycocotools")


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("det") / "synth", preset="tiny", seed=0, progress=False)


@pytest.mark.slow
def test_detection_synth_trains_evaluates_and_writes_its_record(synth_root, tmp_path, monkeypatch):
    from harness.running.evaluate import evaluate

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    protocol = build_protocol("detection", "synth", {"epochs": 1, "lr_steps": [1]})
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    records, _ = evaluate(model, protocol, synth_root, runs_dir=tmp_path / "runs")
    (record,) = records
    assert set(record["metrics"]) == {"box_AP", "mask_AP", "box_AP50", "box_AP75", "mask_AP50", "mask_AP75"}
    assert all(0.0 <= v <= 100.0 for v in record["metrics"].values())
    params = record["protocol"]["params"]
    assert params["iters"] == 16 and params["num_classes"] == 12  # 32 images / 2, 1 epoch


def _predictions(ann_file: Path, seed: int = 0) -> list[dict]:
    """Seeded predictions near the ground truth: jittered boxes, shifted masks, random scores and
    labels (a third wrong), plus one false positive per image."""
    from pycocotools import mask as mask_utils

    rng = np.random.default_rng(seed)
    gt = json.loads(ann_file.read_text())
    out = []
    for image in gt["images"]:
        h, w = image["height"], image["width"]
        boxes, scores, labels, masks = [], [], [], []
        anns = [a for a in gt["annotations"] if a["image_id"] == image["id"]]
        for a in anns + [None]:
            if a is None:
                x, y, bw, bh = rng.uniform(0, w / 2, 2).tolist() + rng.uniform(8, w / 2, 2).tolist()
                m = np.zeros((h, w), bool)
                m[int(y):int(y + bh), int(x):int(x + bw)] = True
                label = int(rng.integers(12))
            else:
                x, y, bw, bh = (np.array(a["bbox"], float) + rng.normal(0, 2, 4)).tolist()
                rle = mask_utils.frPyObjects(a["segmentation"], h, w)
                m = np.roll(mask_utils.decode(rle).astype(bool), tuple(rng.integers(-2, 3, 2)), axis=(0, 1))
                label = a["category_id"] - 1 if rng.random() > 0.33 else int(rng.integers(12))
            boxes.append([x, y, x + max(bw, 1), y + max(bh, 1)])
            scores.append(float(rng.uniform(0.05, 1)))
            labels.append(label)
            masks.append(m)
        out.append({"img_id": image["id"], "ori_shape": (h, w),
                    "pred_instances": {"bboxes": torch.tensor(boxes, dtype=torch.float32),
                                       "scores": torch.tensor(scores), "labels": torch.tensor(labels),
                                       "masks": torch.from_numpy(np.stack(masks))}})
    return out


def _cocoeval(ann_file: Path, predictions: list[dict]) -> dict[str, float]:
    """Box and mask AP / AP50 / AP75 (%) from pycocotools directly."""
    import contextlib
    import io

    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    dets = {"bbox": [], "segm": []}
    for p in predictions:
        inst = p["pred_instances"]
        for box, score, label, m in zip(inst["bboxes"].tolist(), inst["scores"].tolist(), inst["labels"].tolist(),
                                        inst["masks"].numpy()):
            base = {"image_id": p["img_id"], "category_id": label + 1, "score": score}
            dets["bbox"].append({**base, "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]})
            rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
            rle["counts"] = rle["counts"].decode()
            dets["segm"].append({**base, "segmentation": rle})
    out = {}
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann_file))
        for kind, name in (("bbox", "box"), ("segm", "mask")):
            ev = COCOeval(gt, gt.loadRes(dets[kind]), kind)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            out.update({f"{name}_AP": 100 * ev.stats[0], f"{name}_AP50": 100 * ev.stats[1],
                        f"{name}_AP75": 100 * ev.stats[2]})
    return out


@pytest.mark.slow
def test_box_and_mask_ap_match_cocoeval_on_identical_predictions(synth_root):
    import contextlib
    import io

    from mmdet.evaluation import CocoMetric

    from benchmarks.detection.protocol import to_percent

    ann_file = synth_root / "annotations" / "instances_val2017.json"
    predictions = _predictions(ann_file)
    classes = tuple(c["name"] for c in json.loads(ann_file.read_text())["categories"])
    metric = CocoMetric(ann_file=str(ann_file), metric=["bbox", "segm"])
    metric.dataset_meta = {"classes": classes}
    with contextlib.redirect_stdout(io.StringIO()):
        metric.process({}, predictions)
        ours = to_percent(metric.compute_metrics(metric.results))
    direct = _cocoeval(ann_file, predictions)
    assert 5 < direct["box_AP"] < 95 and 5 < direct["mask_AP"] < 95  # a test that could fail
    for key, value in direct.items():
        assert math.isclose(ours[key], value, abs_tol=0.05 + 1e-9), (key, ours[key], value)  # mmdet rounds to 0.1


@pytest.mark.slow
def test_the_built_detector_has_the_official_heads_and_layer_decay_groups():
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import ConfigDict
    from mmengine.optim import build_optim_wrapper

    from benchmarks.detection.mmdet_config import model_config, optim_wrapper
    from benchmarks.detection.mmdet_modules import handed_over, register_modules
    from harness.models.backbone import create_backbone

    register_all_modules(init_default_scope=True)
    register_modules()
    ref = json.loads(FIXTURE.read_text())["archs"]["vit_small"]
    protocol = build_protocol("detection", "ibot_vit_s16", {})
    with handed_over("vit_s", create_backbone("vit_small_patch16_224")):
        detector = MODELS.build(ConfigDict(model_config(protocol.cfg, "vit_s", [384] * 4, 80)))
    heads = sum(p.numel() for n, p in detector.named_parameters() if not n.startswith("backbone."))
    assert heads == ref["head_param_count_from_config"]["total"]
    wrapper = build_optim_wrapper(detector, ConfigDict(optim_wrapper(protocol.cfg) | {"type": "OptimWrapper"}))
    lr_of = {id(p): g["lr"] for g in wrapper.optimizer.param_groups for p in g["params"]}
    named = dict(detector.named_parameters())
    block0 = ref["params"]["backbone.blocks.0.attn.qkv.weight"][1]
    assert lr_of[id(named["backbone.model.blocks.0.attn.qkv.weight"])] == pytest.approx(1e-4 * block0)
    assert lr_of[id(named["neck.lateral_convs.0.conv.weight"])] == pytest.approx(1e-4)
    assert lr_of[id(named["backbone.model.pos_embed"])] == pytest.approx(1e-4 * 0.8 ** 13)
