"""The detection protocol's fast checks: the COCO reader's one-line errors, each parameter's layer
id and lr scale against iBOT's constructor (fixture made by parity/make_official_fixture.py), the
adapter's output shapes and parameter count against the official backbone's, and the refusals
(mmdet missing, a GPU run with CPU-only mmcv ops) -- none of them imports mmdet."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from benchmarks.detection import mmdet_stack
from harness.data import coco_instances as coco_reader
from benchmarks.detection.mmdet_modules import MODEL_PREFIX, detector_groups
from harness.training.drop_path import set_drop_path
from benchmarks.detection.synthetic import instances, rle_counts
from harness.errors import ConfigError, DataError, MissingDependencyError
from harness.models.backbone import create_backbone
from harness.models.multilevel import MultiLevelBackbone

FIXTURE = Path(__file__).resolve().parents[1] / "parity" / "official_ibot_detection.json"
FIXTURE_SHA256 = "d545157bcddeacfe788366e0fda7f8a174cd4eace36412a8337c1c0b1db0145a"
ARCHS = {"vit_small": "vit_small_patch16_224", "vit_base": "vit_base_patch16_224"}


@pytest.fixture(scope="module")
def official() -> dict:
    return json.loads(FIXTURE.read_text())["archs"]


# ----------------------------------------------------------------------------- the COCO reader
def _coco(root: Path, split: str, images, annotations, categories, files=None) -> None:
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / split).mkdir(parents=True, exist_ok=True)
    for name in files if files is not None else [im["file_name"] for im in images]:
        (root / split / name).write_bytes(b"")
    (root / "annotations" / f"instances_{split}.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories}))


IMAGES = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}]
CATS = [{"id": 3, "name": "cat"}, {"id": 1, "name": "dog"}]


def _ann(image_id, category_id):
    return {"id": 1, "image_id": image_id, "category_id": category_id, "bbox": [0, 0, 2, 2]}


def test_a_matching_split_reads_with_classes_in_id_order(tmp_path):
    _coco(tmp_path, "val2017", IMAGES, [_ann(1, 3), _ann(2, 1)], CATS)
    split = coco_reader.check_split(tmp_path, "val2017")
    assert split.classes == ("dog", "cat") and split.num_images == 2 and split.num_annotations == 2


@pytest.mark.parametrize("images, anns, cats, files, match", [
    (IMAGES, [_ann(7, 3)], CATS, None, r"image id\(s\) 7 that its images list does not hold"),
    (IMAGES, [_ann(1, 5)], CATS, None, r"category id\(s\) 5 that its categories do not declare"),
    (IMAGES, [_ann(1, 3)], CATS, ["a.jpg"], r"1 image\(s\) .* are missing .*image id\(s\) 2"),
    (IMAGES + [{"id": 1, "file_name": "c.jpg"}], [], CATS, None, r"image id\(s\) 1 more than once"),
    (IMAGES, [], [], None, "declares no categories"),
])
def test_a_json_that_does_not_match_its_images_is_one_error_line(tmp_path, images, anns, cats, files, match):
    _coco(tmp_path, "val2017", images, anns, cats, files)
    with pytest.raises(DataError, match=match) as err:
        coco_reader.check_split(tmp_path, "val2017")
    assert "\n" not in str(err.value)


def test_a_missing_annotation_file_and_other_categories_are_refused(tmp_path):
    with pytest.raises(DataError, match="no annotation file"):
        coco_reader.check_split(tmp_path, "val2017")
    _coco(tmp_path, "train2017", IMAGES, [], CATS)
    _coco(tmp_path, "val2017", IMAGES, [], CATS[:1])
    with pytest.raises(DataError, match="different categories.*ssl-bench data check coco:instances"):
        coco_reader.check_pair(tmp_path, "train2017", "val2017")
    (tmp_path / "annotations" / "instances_val2017.json").unlink()
    with pytest.raises(DataError, match="no annotation file.*ssl-bench data check coco:instances --data-root"):
        coco_reader.check_pair(tmp_path, "train2017", "val2017")


# ----------------------------------------------------------------------------- the synthetic instances
def test_synthetic_masks_are_coco_rle_and_boxes_enclose_them():
    mask = torch.zeros(6, 5, dtype=torch.bool)
    mask[1:4, 2] = True
    mask[0, 0] = True
    counts = rle_counts(mask.numpy())
    assert sum(counts) == 30 and counts[0] == 0  # starts with a (zero-length) background run
    label = torch.zeros(8, 8, dtype=torch.uint8)
    label[2:5, 3:7] = 9
    (inst,) = instances(label.numpy(), [{"label": 9}], min_pixels=4)
    assert inst["bbox"] == [3, 2, 4, 3] and inst["category_id"] == 9 - 4 + 1
    assert instances(label.numpy(), [{"label": 9}], min_pixels=13) == []


# ----------------------------------------------------------------------------- layer decay parity
def _detector(arch: str) -> nn.Module:
    detector = nn.Module()
    detector.backbone = MultiLevelBackbone(create_backbone(arch), (3, 5, 7, 11), norm="syncbn")
    detector.neck = nn.Module()
    detector.neck.lateral = nn.Conv2d(4, 4, 1)
    return detector


def test_the_fixture_is_the_one_generated():
    assert hashlib.sha256(FIXTURE.read_bytes()).hexdigest() == FIXTURE_SHA256


@pytest.mark.parametrize("arch", ["vit_small", "vit_base"])
def test_layer_ids_lr_scales_and_decay_match_ibots_constructor(arch, official):
    ref = official[arch]
    with torch.device("meta"):  # names and shapes are what grouping reads; no weights drawn
        detector = _detector(ARCHS[arch])
    groups = detector_groups(detector, 1e-4, 0.05, ref["layer_decay"], ref["num_layers"])
    names = {id(p): n for n, p in detector.named_parameters()}
    ours = {}
    for g in groups:
        layer = int(g["group_name"].split("_")[1])
        for p in g["params"]:
            ours[names[id(p)].replace(MODEL_PREFIX, "backbone.")] = (layer, g["lr_scale"], g["weight_decay"], g["lr"])
    for name, (layer, scale, wd) in ref["params"].items():
        assert ours[name][:3] == (layer, pytest.approx(scale, rel=1e-9), wd), name
        assert ours[name][3] == pytest.approx(scale * 1e-4, rel=1e-9)
    # ours holds the ViT's final norm (unused without out_with_norm; the official backbone swaps it for
    # Identity) and the neck: both in the last layer, at the base lr, as the official rule puts them
    extra = set(ours) - set(ref["params"])
    assert extra == {"backbone.norm.weight", "backbone.norm.bias", "neck.lateral.weight", "neck.lateral.bias"}
    assert {ours[n][0] for n in extra} == set(ref["extra_layer_ids"].values()) == {ref["num_layers"] + 1}


def test_adapter_shapes_and_parameter_count_match_the_official_backbone(official):
    ref = official["vit_small"]
    detector = _detector(ARCHS["vit_small"])
    backbone = detector.backbone.eval()
    with torch.no_grad():
        shapes = [list(o.shape) for o in backbone(torch.zeros(1, 3, *ref["probe_input"]))]
    assert shapes == ref["output_shapes"]
    dim = 384
    ours = sum(p.numel() for p in backbone.parameters())
    # the official pos_embed is sized for its img_size (800 x 1008), ours for 224 and resized on the fly;
    # the official backbone has no final norm
    ours_pos = backbone.model.pos_embed.shape[1]
    assert ours - (ours_pos - ref["pos_embed_tokens"]) * dim - 2 * dim == ref["backbone_param_count"]


def test_drop_path_rises_linearly_over_the_blocks():
    model = create_backbone("vit_cpu_tiny")
    assert set_drop_path(model, 0.2) == 6  # both branches of each block (block 0's stay Identity)
    assert [getattr(b.drop_path1, "drop_prob", 0.0) for b in model.blocks] == pytest.approx([0.0, 0.1, 0.2])


# ----------------------------------------------------------------------------- refusals
def test_without_mmdet_the_protocol_is_refused_in_one_line_saying_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mmdet", None)  # import mmdet -> ImportError
    with pytest.raises(MissingDependencyError, match="bash scripts/install_mmcv.sh") as err:
        mmdet_stack.require_mmdet()
    assert "\n" not in str(err.value)
    from harness.protocol_info import build_protocol

    model = SimpleNamespace(context="features", backbone=create_backbone("vit_cpu_tiny"), device=torch.device("cpu"))
    protocol = build_protocol("detection", "synth", {})
    with pytest.raises(MissingDependencyError, match="install them with"):
        protocol.check_runnable(model)


def test_a_gpu_run_with_cpu_only_ops_is_refused_before_it_starts(monkeypatch):
    with pytest.raises(ConfigError, match="built for the CPU only") as err:
        mmdet_stack.check_ops_for_device("cuda", mmdet_stack.NO_CUDA)
    assert "\n" not in str(err.value) and "install_mmcv.sh --force" in str(err.value)
    mmdet_stack.check_ops_for_device("cuda", "12.1")
    mmdet_stack.check_ops_for_device("cpu", mmdet_stack.NO_CUDA)
    from benchmarks.detection import protocol as det_protocol
    from harness.protocol_info import build_protocol

    monkeypatch.setattr(det_protocol, "require_mmdet", lambda: None)
    monkeypatch.setattr(mmdet_stack, "compiled_cuda_version", lambda: mmdet_stack.NO_CUDA)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    model = SimpleNamespace(context="features", backbone=create_backbone("vit_cpu_tiny"), device=torch.device("cuda"))
    with pytest.raises(ConfigError, match="built for the CPU only"):
        build_protocol("detection", "synth", {}).check_runnable(model)


def test_a_model_without_the_blocks_is_refused_saying_what_it_has():
    from harness.protocol_info import build_protocol

    model = SimpleNamespace(context="features", backbone=create_backbone("vit_cpu_tiny"), device=torch.device("cpu"))
    with pytest.raises(ConfigError, match="needs blocks .* has 3 blocks"):
        build_protocol("detection", "ibot_vit_s16", {}).check_runnable(model)


def test_records_read_mmdets_fractions_in_percent_and_no_detections_as_zero_ap():
    from benchmarks.detection.protocol import to_percent

    got = to_percent({"coco/bbox_mAP": 0.494, "coco/segm_mAP": 0.426, "coco/bbox_mAP_50": 0.7})
    assert got["box_AP"] == pytest.approx(49.4) and got["mask_AP"] == pytest.approx(42.6)
    assert got["box_AP50"] == pytest.approx(70.0) and got["mask_AP75"] != got["mask_AP75"]  # absent: NaN
    assert set(to_percent({}).values()) == {0.0}  # COCOeval scores an empty detection list 0
