"""LOST and TokenCut (benchmarks/discovery): parity with valeoai/LOST and YangtaoWANG95/TokenCut on
fixed features, the readers, both protocols end to end on the SynthScenes discovery set, and one
clear error for bad inputs."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.discovery.keys import check_has_keys, last_block_features
from benchmarks.discovery.lost import box_iou, corloc_hit, lost
from benchmarks.discovery.protocol import LOST, PadToPatchMultiple, TokenCut
from benchmarks.discovery.tokencut import tokencut
from benchmarks.discovery.synthetic import generate, voc_xml
from harness.data.coco20k import COCO20K_LIST, COCO20K_SHA256, COCO20k, read_coco20k_list
from harness.data.voc_boxes import VOC07Boxes
from harness.errors import ConfigError, DataError, NotApplicable
from harness.models.handle import ModelHandle

FIXTURE = Path(__file__).parents[1] / "fixtures" / "lost_parity.json"
# reference/gen_lost_parity.py and gen_tokencut_parity.py wrote them; regenerate with the sha256
FIXTURE_SHA256 = "21f981f83b162ee664c2496227f958d1c436894edf81c6b842052c2eca84e076"
TOKENCUT_FIXTURE = FIXTURE.parent / "tokencut_parity.json"
TOKENCUT_SHA256 = "e052a89d49a7135598bc42c066790194230079ce083649885294ec631877d45c"


@pytest.fixture(scope="module")
def parity():
    data = FIXTURE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == FIXTURE_SHA256, "lost_parity.json changed: update FIXTURE_SHA256"
    return json.loads(data)


@pytest.fixture(scope="module")
def discovery_tiny(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("lost") / "synth", "tiny", 0, progress=False)


@pytest.fixture(scope="module")
def tiny_vit():
    return ModelHandle.random_init("vit_cpu_tiny", seed=0)


def test_seed_and_box_match_the_official_lost(parity):
    for case in parity["cases"]:
        feats = torch.tensor(case["features"], dtype=torch.float32)
        found = lost(feats, tuple(case["grid"]), (case["patch"], case["patch"]), tuple(case["image_hw"]),
                     case["k_patches"])
        where = f"{case['grid']} {case['kind']}"
        assert found.seed == case["seed"], where
        assert found.scores.tolist() == case["degree"], where
        assert [int(v) for v in found.box] == case["box"], where
    assert any(len(set(c["degree"])) < len(c["degree"]) for c in parity["cases"])  # ties are exercised


def test_tokencut_seed_box_and_eigenvector_match_the_official_ncut():
    data = TOKENCUT_FIXTURE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == TOKENCUT_SHA256, "tokencut_parity.json changed: update TOKENCUT_SHA256"
    for case in json.loads(data)["cases"]:
        feats = torch.tensor(case["features"], dtype=torch.float32)
        for run in case["runs"]:
            found = tokencut(feats, tuple(case["grid"]), (case["patch"], case["patch"]), tuple(case["image_hw"]),
                             run["tau"], run["eps"], binary=not run["no_binary_graph"])
            where = f"{case['grid']} {case['kind']} tau {run['tau']} binary {not run['no_binary_graph']}"
            assert found.seed == run["seed"] and [int(v) for v in found.box] == run["box"], where
            np.testing.assert_allclose(found.scores, run["eigenvector"], atol=1e-6, err_msg=where)
            assert [corloc_hit(np.asarray(run["box"]), np.asarray(g)) for g in run["gt_boxes"]] == run["hits"]


def test_iou_and_corloc_match_the_official_rule(parity):
    hits = []
    for case in parity["cases"]:
        for gt, ious, hit in zip(case["gt_boxes"], case["ious"], case["hits"]):
            np.testing.assert_allclose(box_iou(np.asarray(case["box"]), np.asarray(gt)), ious, atol=1e-6)
            assert corloc_hit(np.asarray(case["box"]), np.asarray(gt)) == hit
            hits.append(hit)
    assert 100.0 * np.mean(hits) == pytest.approx(parity["corloc"], abs=1e-9)
    for edge in parity["iou_edges"]:
        got = box_iou(np.asarray(edge["box"]), np.asarray(edge["gt_boxes"]))
        np.testing.assert_allclose(got, edge["ious"], atol=1e-6)
        assert corloc_hit(np.asarray(edge["box"]), np.asarray(edge["gt_boxes"])) == any(
            v >= 0.5 for v in edge["ious"])
    assert [e["ious"] for e in parity["iou_edges"]][0] == [0.5]  # float32: an exact half counts


def test_voc_boxes_are_read_as_lost_extracts_them(parity, tmp_path):
    gt = parity["gt_readers"]
    voc = tmp_path / "VOC2007"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (voc / sub).mkdir(parents=True)
    objects = "".join(
        f"<object><name>{o['name']}</name><truncated>{o['truncated']}</truncated><difficult>{o['difficult']}"
        f"</difficult><bndbox>" + "".join(f"<{k}>{v}</{k}>" for k, v in o["bndbox"].items()) + "</bndbox></object>"
        for o in gt["voc_objects"])
    (voc / "Annotations" / "a.xml").write_text(f"<annotation>{objects}</annotation>")
    (voc / "JPEGImages" / "a.jpg").write_bytes(b"")
    (voc / "ImageSets" / "Main" / "trainval.txt").write_text("a\n")
    assert VOC07Boxes(tmp_path, "trainval").boxes(0).tolist() == gt["voc_boxes"]
    assert VOC07Boxes(tmp_path, "trainval", no_hard=True).boxes(0).tolist() == gt["voc_boxes_no_hard"]


def test_coco20k_reads_lost_list_and_rounds_boxes(parity, tmp_path):
    raw = gzip.decompress(COCO20K_LIST.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == COCO20K_SHA256 and len(read_coco20k_list()) == 19817
    (tmp_path / "train2014").mkdir()
    (tmp_path / "annotations").mkdir()
    ids = [9, 25]
    for i in ids:
        (tmp_path / "train2014" / f"COCO_train2014_{i:012d}.jpg").write_bytes(b"")
    anns = [dict(a, image_id=25) for a in parity["gt_readers"]["coco_annotations"]] + [
        {"image_id": 7, "bbox": [1, 1, 2, 2], "iscrowd": 0}]
    (tmp_path / "annotations" / "instances_train2014.json").write_text(json.dumps({"annotations": anns}))
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"train2014/COCO_train2014_{i:012d}.jpg\n" for i in (25, 9)))
    ds = COCO20k(tmp_path, "train", list_file=listing)
    assert ds.stems == ["9", "25"]  # CocoDetection's order: increasing ids
    assert ds.boxes(1).tolist() == parity["gt_readers"]["coco_boxes"] and ds.boxes(0).shape == (0, 4)


def test_keys_are_the_middle_third_of_the_last_qkv(tiny_vit):
    b = tiny_vit.backbone
    x = torch.randn(1, 3, 40, 24)
    with torch.no_grad():
        keys = last_block_features(b, x, "k")
        tokens = b.prepare_tokens(x)
        for blk in b.blocks[:-1]:
            tokens = blk(tokens)
        qkv = b.blocks[-1].attn.qkv(b.blocks[-1].norm1(tokens))
    d = b.embed_dim
    assert keys.shape == (1, 5 * 3, d)
    torch.testing.assert_close(keys, qkv[:, 1:, d:2 * d])


def test_padding_keeps_the_image_and_adds_zeros():
    from PIL import Image

    img = Image.fromarray(np.full((10, 21, 3), 255, np.uint8))
    x = PadToPatchMultiple(8)(img)
    assert x.shape == (3, 16, 24) and (x[:, 10:] == 0).all() and (x[:, :, 21:] == 0).all()
    assert x[0, 0, 0] == pytest.approx((1 - 0.485) / 0.229)


def test_lost_on_synthscenes_tiny_end_to_end(discovery_tiny, tiny_vit, isolated_home):
    from harness.per_image import HITS

    result = LOST.from_preset("synth", {"progress": False, "threads": 1}).run(tiny_vit, discovery_tiny)[0]
    assert result.dataset == "voc07" and result.split == "trainval" and result.params["n_images"] == 24
    assert 0.0 <= result.metrics["corloc"] <= 100.0
    assert result.per_image["kind"] == HITS and result.per_image["images"] == 24
    preds = json.loads(Path(result.artifacts["predictions"]).read_text())
    assert len(preds) == 24 and all(len(b) == 4 for b in preds.values())


def test_no_hard_skips_images_with_only_hard_objects(discovery_tiny, tiny_vit, isolated_home, tmp_path):
    root = tmp_path / "hard"
    shutil.copytree(discovery_tiny, root)
    xml = sorted((root / "VOC2007" / "Annotations").glob("*.xml"))[0]
    xml.write_text(xml.read_text().replace("<difficult>0</difficult>", "<difficult>1</difficult>"))
    result = LOST.from_preset("synth", {"progress": False, "threads": 1, "no_hard": True}).run(tiny_vit, root)[0]
    assert result.params["n_skipped_hard"] == 1 and result.params["n_images"] == 23


def test_tokencut_on_synthscenes_tiny_end_to_end(discovery_tiny, tiny_vit, isolated_home):
    result = TokenCut.from_preset("synth", {"progress": False, "threads": 1}).run(tiny_vit, discovery_tiny)[0]
    assert result.params["n_images"] == 24 and 0.0 <= result.metrics["corloc"] <= 100.0
    assert result.per_image["images"] == 24


def test_examples_show_boxes(discovery_tiny, tiny_vit):
    examples = LOST.from_preset("synth", {"progress": False}).examples(tiny_vit, discovery_tiny, count=2, seed=0)
    assert len(examples) == 2 and [p.label for p in examples[0].panels] == ["ground truth", "LOST"]
    assert examples[0].panels[1].image.shape == (64, 64, 3) and isinstance(examples[0].correct, bool)


def test_a_model_without_keys_is_refused(discovery_tiny):
    class Conv(torch.nn.Module):
        arch, patch_size = "tiny_cnn", 8

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 8, 8)

    # a suite lists the pair as not applicable
    with pytest.raises(NotApplicable, match=r"LOST needs a ViT's last attention block .* model cnn \(tiny_cnn\)"):
        LOST.from_preset("synth").run(ModelHandle("cnn", Conv()), discovery_tiny)
    with pytest.raises(NotApplicable, match="TokenCut needs a ViT's last attention block"):
        TokenCut.from_preset("synth").run(ModelHandle("cnn", Conv()), discovery_tiny)


def test_bad_layouts_and_settings_are_data_or_config_errors(discovery_tiny, tmp_path):
    with pytest.raises(DataError, match="no VOC2007 detection layout"):
        VOC07Boxes(tmp_path, "trainval")
    root = tmp_path / "copy"
    shutil.copytree(discovery_tiny, root)
    stems = VOC07Boxes(root, "trainval").stems
    bad = root / "VOC2007" / "Annotations" / f"{stems[3]}.xml"
    bad.write_text(voc_xml(stems[3], 64, "x", (1, 2, 3, 4)).replace("<xmax>3</xmax>", "<xmax>3.5</xmax>"))
    with pytest.raises(DataError, match=f"{stems[3]}.xml.*xmax"):
        VOC07Boxes(root, "trainval").boxes(3)
    (root / "VOC2007" / "Annotations" / f"{stems[5]}.xml").unlink()
    with pytest.raises(DataError, match="missing"):
        VOC07Boxes(root, "trainval")
    with pytest.raises(DataError, match="split must be 'train'"):
        COCO20k(tmp_path, "val")
    with pytest.raises(ConfigError, match="no_hard"):
        LOST.from_preset("synth", {"dataset": "coco20k", "split": "train", "no_hard": True}).reader(tmp_path)


def test_cli_bad_layout_is_one_error_line_and_no_record(discovery_tiny, isolated_home, capsys):
    from harness.cli import main

    root = isolated_home / "broken"
    shutil.copytree(discovery_tiny, root)
    shutil.rmtree(root / "VOC2007" / "Annotations")
    rc = main(["--threads", "1", "eval", "--protocol", "lost", "--preset", "synth", "--dataset", "voc2007:boxes",
               "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "VOC2007" in lines[0]
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_lost_reads_the_keys_of_a_transformers_dinov2(tmp_path):
    transformers = pytest.importorskip("transformers")
    from harness.models.sources import build_model

    config = transformers.Dinov2WithRegistersConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                    intermediate_size=64, image_size=28, patch_size=14,
                                                    num_register_tokens=4)
    torch.manual_seed(0)
    transformers.Dinov2WithRegistersModel(config).save_pretrained(tmp_path / "hf-dinov2_reg")
    backbone = build_model(f"hf:{tmp_path / 'hf-dinov2_reg'}").backbone.eval()
    check_has_keys(backbone, "LOST")  # a transformers ViT with registers has keys too
    x = torch.randn(1, 3, 28, 42)
    with torch.no_grad():
        keys = last_block_features(backbone, x, "k")
    assert keys.shape == (1, 2 * 3, 32)  # the class token and four registers dropped
