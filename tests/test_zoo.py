"""The model zoo: the listing covers every published checkpoint, import verifies sha256 and
fixes layout / arch, lookups find imported and official files."""
from __future__ import annotations

import argparse

import pytest
import torch
import yaml

from harness.models.checkpoints import load_checkpoint
from harness.errors import CheckpointError, ConfigError
from harness.models.importers import LAYOUTS
from harness.io_utils import sha256_file
from harness.models.zoo import find_checkpoint, format_zoo, load_zoo, zoo_entry, zoo_import, zoo_list

EXPECTED = {
    "dino": ["dino_vits16", "dino_vits8", "dino_vitb16", "dino_vitb8"],
    "ibot": ["ibot_vits16", "ibot_vitb16", "ibot_vitb16_rand_mask", "ibot_vitl16", "ibot_vitl16_rand_mask",
             "ibot_vitb16_pt22k", "ibot_vitl16_pt22k"],
    "cribo": ["cribo_vits16_coco", "cribo_vits16_in1k", "cribo_vitb16_in1k"],
    "synclr": ["synclr_vitb16", "synclr_vitl14"],
    "dinov2": [f"dinov2_vit{s}14{r}" for s in "sblg" for r in ("", "_reg")],
    "mae": ["mae_vitb16", "mae_vitl16", "mae_vith14"],
    "croc": ["croc_vits16_coco", "croc_vits16_cocoplus", "croc_vits16_in1k"],
    "timet": ["timet_vits16"],
    "leopart": ["leopart_vits16", "leopart_vitb8"],
    "neco": [f"neco_{b}_vit{s}14{t}" for b in ("dinov2", "dinov2r", "dinov2r_xr") for s in "sb"
             for t in ("", "_teacher")] + [f"neco_{b}_vits16{t}" for b in ("dino", "timet", "leopart")
                                           for t in ("", "_teacher")],
}


def test_zoo_lists_every_published_checkpoint():
    df = zoo_list()
    df = df[df["layout"] != "harness"]  # the shipped SynthScenes checkpoints: tests/test_zoo_shipped.py
    names = set(df["name"])
    for method, expected in EXPECTED.items():
        for n in expected:
            assert n in names, n
            if method in ("dino", "ibot"):
                assert f"{n}_full" in names  # backbone file and full training checkpoint
    # 64: with iBOT's out_dim-1000 ViT-S/16 and DINO's Google-Landmarks ViT-S/16 (a backbone file only)
    assert len(df) == 64 and set(df["method"]) == set(EXPECTED)
    assert zoo_list("dino").set_index("name").at["dino_vits16_gldv2", "pretrain_data"] == "GLDv2"
    assert set(df["layout"]) <= set(LAYOUTS)
    assert all(u.startswith("https://") for u in df["url"])
    zoo = load_zoo()
    assert zoo["synclr_vitl14"].arch == "vit_large_patch14_224"
    assert zoo["dino_vitb8"].arch == "vit_base_patch8_224" and zoo["dino_vitb8"].claims["imagenet_linear_top1"] == 80.1
    assert zoo["ibot_vitl16_pt22k"].which == "student" and zoo["ibot_vitl16_pt22k"].file == "checkpoint_student.pth"
    assert zoo["cribo_vits16_coco"].url.endswith("/159667") and zoo["cribo_vits16_coco"].needs_trust
    assert zoo["cribo_vits16_coco"].pretrain_data == "COCO" and zoo["cribo_vits16_coco"].epochs == 300
    text = format_zoo(zoo_list("cribo"))
    assert "cribo_vitb16_in1k" in text and "https://rdr.kuleuven.be/api/access/datafile/159666" in text
    assert "dino" not in text
    # the new families: patch 14 and registers in the arch, the forward settings in the layout
    assert zoo["dinov2_vitb14_reg"].arch == "vit_base_patch14_reg4_dinov2" and zoo["dinov2_vitb14_reg"].patch_size == 14
    assert zoo["dinov2_vitg14"].url == "https://dl.fbaipublicfiles.com/dinov2/dinov2_vitg14/dinov2_vitg14_pretrain.pth"
    assert zoo["dinov2_vits14"].claims == {"imagenet_knn_top1": 79.0, "imagenet_linear_top1": 81.1}
    assert zoo["mae_vitb16"].layout == "mae" and zoo["mae_vitb16"].epochs == 1600
    assert zoo["croc_vits16_in1k"].url.endswith("/28925") and zoo["croc_vits16_in1k"].needs_trust
    assert zoo["leopart_vits16"].which == "student" and zoo["timet_vits16"].layout == "timet"
    assert zoo["neco_dinov2r_vitb14_teacher"].url.endswith(
        "vit-base/dinov2-architectures/neco_on_dinov2r_vit14_teacher.ckpt")


def test_unknown_name_suggests():
    with pytest.raises(ConfigError, match="did you mean dino_vits16"):
        zoo_entry("dino_vit_s16")


@pytest.fixture()
def tiny_zoo(tmp_path):
    """A zoo file with tiny entries so that imports are fast; the official file layouts are real."""
    from test_importers import make_layout

    files = {}
    for layout in ("dino_pretrain", "cribo_full", "ibot_student_flat"):
        obj, teacher, _ = make_layout(layout, torch.Generator().manual_seed(0))
        files[layout] = tmp_path / f"{layout}.pth"
        torch.save(obj, files[layout])
    entry = dict(method="dino", arch="vit_cpu_tiny", patch_size=8, pretrain_data="synthetic", epochs=1,
                 url="https://example.org/tiny/dino_tiny.pth", file="dino_tiny.pth")
    zoo = {"checkpoints": [
        dict(entry, name="tiny_dino", layout="dino_pretrain", sha256=sha256_file(files["dino_pretrain"])),
        dict(entry, name="tiny_dino_badsha", layout="dino_pretrain", sha256="0" * 64),
        dict(entry, name="tiny_cribo", method="cribo", layout="cribo_full", file="tiny-cribo.pth"),
        dict(entry, name="tiny_wrong_arch", layout="dino_pretrain", arch="vit_small_patch8_224"),
    dict(entry, name="tiny_ibot_student", method="ibot", layout="ibot_teacher", which="student"),  # as the 22K files
    ]}
    path = tmp_path / "zoo.yaml"
    path.write_text(yaml.safe_dump(zoo))
    return path, files


def test_zoo_import(tmp_path, tiny_zoo):
    zoo_path, files = tiny_zoo
    out = zoo_import("tiny_dino", files["dino_pretrain"], tmp_path / "zoo", zoo_path=zoo_path)
    assert out == tmp_path / "zoo" / "tiny_dino.safetensors"
    _, meta = load_checkpoint(out)
    assert meta["zoo_name"] == "tiny_dino" and meta["method"] == "dino" and meta["layout"] == "dino_pretrain"
    assert meta["source_sha256"] == sha256_file(files["dino_pretrain"])
    assert meta["source_url"] == "https://example.org/tiny/dino_tiny.pth"
    with pytest.raises(CheckpointError, match="does not match"):
        zoo_import("tiny_dino_badsha", files["dino_pretrain"], tmp_path / "zoo", zoo_path=zoo_path)
    with pytest.raises(CheckpointError, match="does not hold a vit_small_patch8_224"):
        zoo_import("tiny_wrong_arch", files["dino_pretrain"], tmp_path / "zoo", zoo_path=zoo_path)
    with pytest.raises(CheckpointError, match="--trust-checkpoint"):
        zoo_import("tiny_cribo", files["cribo_full"], tmp_path / "zoo", zoo_path=zoo_path)
    out = zoo_import("tiny_cribo", files["cribo_full"], tmp_path / "zoo", trust=True, zoo_path=zoo_path)
    assert load_checkpoint(out)[1]["method"] == "cribo" and load_checkpoint(out)[1]["branch"] == "teacher"
    out = zoo_import("tiny_ibot_student", files["ibot_student_flat"], tmp_path / "zoo", zoo_path=zoo_path)
    assert load_checkpoint(out)[1]["import_report"]["dropped"] == {"masked_embed": 1}
    with pytest.raises(CheckpointError, match="layout cribo_full expects the backbone under"):  # wrong file
        zoo_import("tiny_cribo", files["dino_pretrain"], tmp_path / "zoo2", trust=True, zoo_path=zoo_path)


def test_find_checkpoint(tmp_path, tiny_zoo):
    zoo_path, files = tiny_zoo
    zoo_dir = tmp_path / "zd"
    found = find_checkpoint("tiny_dino", zoo_dir, zoo_path)
    assert found.status == "missing" and "https://example.org/tiny/dino_tiny.pth" in found.message
    (zoo_dir / "tiny").mkdir(parents=True)  # the URL's folder, as iBOT's files share names
    (zoo_dir / "tiny" / "dino_tiny.pth").write_bytes(files["dino_pretrain"].read_bytes())
    found = find_checkpoint("tiny_dino", zoo_dir, zoo_path)
    assert found.status == "official" and found.path.name == "dino_tiny.pth"
    zoo_import("tiny_dino", found.path, zoo_dir, zoo_path=zoo_path)
    assert find_checkpoint("tiny_dino", zoo_dir, zoo_path).status == "harness"
    assert find_checkpoint("not_in_zoo", zoo_dir, zoo_path).status == "unknown"


def test_cli_functions(capsys, tmp_path, tiny_zoo):
    from harness.models import zoo

    parser = argparse.ArgumentParser()
    zoo.add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["zoo", "list", "--method", "synclr"])
    assert args.func(args) == 0
    assert "synclr_vit_l_14.pth" in capsys.readouterr().out
    _, files = tiny_zoo
    args = parser.parse_args(["zoo", "convert", str(files["cribo_full"]), "--out", str(tmp_path / "c"),
                              "--trust-checkpoint"])
    assert args.func(args) == 0
    assert "layout cribo_full" in capsys.readouterr().out
