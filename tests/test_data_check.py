"""`ssl-bench data check` on the SynthScenes sets of the most used keys (ready, sizes synthetic) and on
broken copies of them (exit 2, the problem named)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.cli import main
from harness.data.check import check_root

# (protocol whose SynthScenes set holds the layout, key checked)
SETS = [("davis", "davis2017"), ("image_retrieval", "roxford5k"), ("copy_detection", "copydays"),
        ("lost", "voc07"), ("depth_linear", "nyu"), ("correspondence", "spair71k")]


@pytest.fixture(scope="module")
def synth_sets(tmp_path_factory) -> dict[str, Path]:
    from harness.registry import protocol_declarations

    declared = protocol_declarations()
    base = tmp_path_factory.mktemp("sets")
    made = {}
    for protocol, _ in SETS:
        # one folder per generator: image_retrieval's and copy_detection's command finds the set the
        # other wrote (the same meta.json), and a generator of its own would refuse that folder
        out = base / (declared[protocol].synthetic or protocol)
        assert main(["data", "synth", "--for", protocol, "--preset", "tiny", "--out", str(out), "--no-progress"]) == 0
        made[protocol] = out
    return made


def _official_copy(src: Path, tmp_path: Path) -> Path:
    """A copy that is no longer a SynthScenes root (its meta.json removed)."""
    root = tmp_path / src.name
    shutil.copytree(src, root)
    (root / "meta.json").unlink()
    return root


@pytest.mark.parametrize("protocol,key", SETS)
def test_each_synthscenes_set_is_ready(synth_sets, protocol, key, capsys):
    assert main(["data", "check", key, "--data-root", str(synth_sets[protocol])]) == 0
    assert "sizes synthetic" in capsys.readouterr().out


def test_davis_at_another_resolution_is_named(synth_sets, tmp_path):
    report = check_root("davis2017", _official_copy(synth_sets["davis"], tmp_path))
    assert not report.ready
    text = report.text()
    assert "not 480: another resolution" in text and "split train: MISSING" in text
    assert "3 sequences (DOES NOT MATCH official 30)" in text


def test_davis_frame_without_annotation(synth_sets, tmp_path):
    root = tmp_path / "davis"
    shutil.copytree(synth_sets["davis"], root)
    sorted((root / "Annotations" / "480p").glob("*/*.png"))[3].unlink()
    report = check_root("davis2017", root)
    assert not report.ready and "split val: BROKEN" in report.text()


def test_retrieval_image_absent(synth_sets, tmp_path, capsys):
    root = tmp_path / "retrieval"
    shutil.copytree(synth_sets["image_retrieval"], root)
    sorted((root / "roxford5k" / "jpg").glob("*.jpg"))[0].unlink()
    assert main(["data", "check", "roxford5k", "--data-root", str(root)]) == 2
    assert "NOT READY" in capsys.readouterr().out


def test_depth_in_centimetres_is_a_units_problem(synth_sets, tmp_path):
    root = _official_copy(synth_sets["depth_linear"], tmp_path)
    for png in root.glob("*/*/sync_depth_*.png"):
        mm = np.asarray(Image.open(png), dtype=np.uint16)
        Image.fromarray((mm // 10).astype(np.uint16)).save(png)  # centimetres where millimetres belong
    report = check_root("nyu", root)
    assert not report.ready
    assert "split train: BROKEN" in report.text() and "look like centimetres" in report.text()


def test_voc_split_file_naming_an_absent_mask(synth_tiny, tmp_path, capsys):
    root = tmp_path / "voc"
    shutil.copytree(synth_tiny, root)
    mask = sorted((root / "VOC2012" / "SegmentationClass").glob("val_*.png"))[0]
    mask.unlink()
    assert main(["data", "check", "voc", "--data-root", str(root)]) == 2
    out = capsys.readouterr().out
    assert "split val: BROKEN" in out and mask.stem in out


def test_a_layout_only_mmseg_reads_is_not_called_ready(tmp_path):
    report = check_root("pascal_context", tmp_path)  # mmseg reads it; the layout's own check counts it
    assert not report.ready and "SegmentationClassContext: MISSING" in report.text()
