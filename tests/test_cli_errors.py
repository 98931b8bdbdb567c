"""Bad input gives one clear error (exit code 2, message on stderr) and writes no result."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.models.backbone import create_backbone
from harness.models.checkpoints import save_checkpoint
from harness.cli import main


def _no_records(home: Path) -> bool:
    runs = home / "results" / "runs"
    return not runs.exists() or not any(runs.iterdir())


def _eval(args, capsys):
    rc = main(["--threads", "1", "eval", *args])
    return rc, capsys.readouterr().err


KNN = ["--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder", "--set", "progress=false"]


def test_missing_data_root(isolated_home, capsys):
    rc, err = _eval(KNN + ["--data-root", str(isolated_home / "nowhere"), "--random-init", "vit_cpu_tiny"],
                    capsys)
    assert rc == 2 and "nowhere" in err and "does not exist" in err
    assert _no_records(isolated_home)


def test_corrupt_image(isolated_home, synth_tiny, capsys):
    root = isolated_home / "imagenet"
    shutil.copytree(synth_tiny / "imagenet", root)
    victim = sorted((root / "val").rglob("*.jpg"))[2]
    victim.write_bytes(victim.read_bytes()[:100])
    rc, err = _eval(KNN + ["--data-root", str(root), "--random-init", "vit_cpu_tiny"], capsys)
    assert rc == 2 and victim.name in err
    assert _no_records(isolated_home)


def test_mask_with_out_of_range_label(isolated_home, synth_tiny, capsys):
    root = isolated_home / "synth"
    shutil.copytree(synth_tiny / "VOC2012", root / "VOC2012")
    if (synth_tiny / "meta.json").exists():
        shutil.copy(synth_tiny / "meta.json", root / "meta.json")
    # a validation mask: val always reads SegmentationClass (train may read SegmentationClassAug)
    masks = sorted((root / "VOC2012" / "SegmentationClass").glob("val*.png"))
    m = Image.open(masks[0])
    arr = np.array(m)
    arr[0, 0] = 200
    out = Image.fromarray(arr, mode="P")
    out.putpalette(m.getpalette())
    out.save(masks[0])
    rc, err = _eval(["--protocol", "dense_nn", "--preset", "cribo", "--dataset", "voc",
                     "--data-root", str(root), "--random-init", "vit_cpu_tiny",
                     "--set", "fractions=[1/1]", "--set", "seeds=[42]", "--set", "progress=false"], capsys)
    assert rc == 2 and "200" in err and masks[0].stem in err
    assert _no_records(isolated_home)


def _voc_copy(home: Path, synth_tiny: Path) -> Path:
    root = home / "synth"
    shutil.copytree(synth_tiny / "VOC2012", root / "VOC2012")
    if (synth_tiny / "meta.json").exists():
        shutil.copy(synth_tiny / "meta.json", root / "meta.json")
    return root


def _dense_eval(root: Path, preset: str, capsys):
    return _eval(["--protocol", "dense_nn", "--preset", preset, "--dataset", "voc", "--data-root", str(root),
                  "--random-init", "vit_cpu_tiny", "--set", "fractions=[1/1]", "--set", "seeds=[42]",
                  "--set", "progress=false", "--set", "input_size=64"] if preset == "hbird" else
                 ["--protocol", "dense_nn", "--preset", preset, "--dataset", "voc", "--data-root", str(root),
                  "--random-init", "vit_cpu_tiny", "--set", "fractions=[1/1]", "--set", "seeds=[42]",
                  "--set", "progress=false"], capsys)


@pytest.mark.parametrize("preset", ["cribo", "hbird"])
def test_mask_of_another_size_than_its_image(isolated_home, synth_tiny, capsys, preset):
    """hbird resizes image and mask to one square, which hid the mismatch: both presets refuse."""
    root = _voc_copy(isolated_home, synth_tiny)
    masks = sorted((root / "VOC2012" / "SegmentationClass").glob("val*.png"))
    m = Image.open(masks[0])
    small = m.resize((m.width - 8, m.height), Image.NEAREST)
    small.putpalette(m.getpalette())
    small.save(masks[0])
    rc, err = _dense_eval(root, preset, capsys)
    assert rc == 2 and masks[0].name in err and "its image" in err
    assert _no_records(isolated_home)


@pytest.mark.parametrize("preset", ["cribo", "hbird"])
def test_exif_rotated_image_of_a_segmentation_set_is_refused(isolated_home, synth_tiny, capsys, preset):
    root = _voc_copy(isolated_home, synth_tiny)
    images = sorted((root / "VOC2012" / "JPEGImages").glob("val*.jpg"))
    img = Image.open(images[0])
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees for display
    img.save(images[0], exif=exif.tobytes(), quality=95)
    rc, err = _dense_eval(root, preset, capsys)
    assert rc == 2 and images[0].name in err and "EXIF orientation 6" in err
    assert _no_records(isolated_home)


def test_unknown_protocol_setting(isolated_home, synth_tiny, capsys):
    rc, err = _eval(KNN + ["--data-root", str(synth_tiny / "imagenet"), "--random-init", "vit_cpu_tiny",
                           "--set", "neighbours=20"], capsys)
    assert rc == 2 and "'neighbours'" in err and "allowed keys" in err
    assert _no_records(isolated_home)


def test_unknown_protocol_and_method_names(isolated_home, synth_tiny, capsys, tmp_path):
    rc, err = _eval(["--protocol", "nope", "--dataset", "voc", "--data-root", str(synth_tiny),
                     "--random-init", "vit_cpu_tiny"], capsys)
    assert rc == 2 and "unknown protocol 'nope'" in err and "dense_nn" in err
    cfg = tmp_path / "m.yaml"
    cfg.write_text("method: {name: mae}\n")
    rc = main(["pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown method 'mae'" in err and "dino" in err
    cfg.write_text("method: {name: dino, teacher_tmp: 0.04}\n")
    rc = main(["pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "'teacher_tmp'" in err and "m.yaml" in err


def test_checkpoint_of_another_architecture(isolated_home, synth_tiny, capsys):
    b = create_backbone("vit_cpu_tiny", embed_dim=96, num_heads=3)
    path = save_checkpoint(isolated_home / "ck", b.state_dict(),
                           {"method": "dino", "arch": "vit_cpu_tiny", "arch_kwargs": {
                               **b.arch_kwargs, "embed_dim": 64, "num_heads": 2}})
    rc, err = _eval(KNN + ["--data-root", str(synth_tiny / "imagenet"), "--checkpoint", str(path)], capsys)
    assert rc == 2 and "does not fit architecture" in err and "shape mismatches" in err
    assert _no_records(isolated_home)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _tiny_checkpoint(path: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    b = create_backbone("vit_cpu_tiny")
    return save_checkpoint(path, b.state_dict(), {"method": "dino", "arch": "vit_cpu_tiny",
                                                  "arch_kwargs": b.arch_kwargs})


def test_weights_replaced_beside_an_old_json_are_refused(isolated_home, synth_tiny, capsys):
    """Other weights beside an old .json used to be keyed by the old sha256: eval served
    the old model's cached features and its stored number ("already measured")."""
    ckpt = _tiny_checkpoint(isolated_home / "ck", 0)
    other = _tiny_checkpoint(isolated_home / "other", 1)
    args = KNN + ["--data-root", str(synth_tiny / "imagenet"), "--checkpoint", str(ckpt)]
    rc, _ = _eval(args, capsys)
    assert rc == 0
    shutil.copyfile(other, ckpt)
    rc = main(["--threads", "1", "eval", *args])
    out, err = capsys.readouterr()
    assert rc == 2 and "already measured" not in out
    line = _one_error_line(err)
    assert str(ckpt) in line and "sha256" in line and "save" in line


@pytest.mark.parametrize("meta, expected", [({"method": "dino", "arch_kwargs": {}}, "'arch'"),
                                            ([1, 2], "JSON object")])
def test_checkpoint_metadata_without_arch_or_not_an_object(isolated_home, synth_tiny, capsys, meta, expected):
    ckpt = _tiny_checkpoint(isolated_home / "ck", 0)
    (isolated_home / "ck.json").write_text(json.dumps(meta))
    rc, err = _eval(KNN + ["--data-root", str(synth_tiny / "imagenet"), "--checkpoint", str(ckpt)], capsys)
    assert rc == 2
    line = _one_error_line(err)
    assert "ck.json" in line and expected in line
    assert _no_records(isolated_home)


TINY_PRETRAIN = ["--set", "train.batch_size=8", "--set", "train.max_steps=1", "--set", "backbone.depth=1",
                 "--no-progress"]


def test_truncated_resume_file(isolated_home, synth_tiny, capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    torch.save({"step": 3, "method": {"w": torch.zeros(4096)}}, out / "resume.pt")
    data = (out / "resume.pt").read_bytes()
    (out / "resume.pt").write_bytes(data[:len(data) // 2])  # killed while copying it, disk full, ...
    rc = main(["--threads", "1", "pretrain", "methods/dino_cpu.yaml", "--data-root", str(synth_tiny),
               "--out", str(out), *TINY_PRETRAIN])
    assert rc == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(out / "resume.pt") in line and "delete" in line and "--out" in line


def test_unknown_override_blames_the_command_line(isolated_home, synth_tiny, capsys, tmp_path):
    rc = main(["pretrain", "methods/dino_cpu.yaml", "--data-root", str(synth_tiny), "--out", str(tmp_path / "o"),
               "--set", "train.foo=1"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "'foo'" in line and "train.foo=1" in line and "command line" in line
    assert "dino_cpu.yaml" not in line
    rc = main(["pretrain", "methods/dino_cpu.yaml", "--data-root", str(synth_tiny), "--out", str(tmp_path / "o"),
               "--set", "train.lr=fast"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "train.lr=fast" in line and "command line" in line and "number" in line
    # a key that is wrong in the file itself still names the file
    cfg = tmp_path / "m.yaml"
    cfg.write_text("_base_: methods/dino_cpu.yaml\ntrain: {fooo: 1}\n")
    rc = main(["pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(tmp_path / "o"),
               "--set", "train.lr=0.1"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "m.yaml" in line and "'fooo'" in line and "command line" not in line


def test_pretrain_missing_data_root_says_what_to_do(isolated_home, capsys, tmp_path):
    rc = main(["pretrain", "methods/dino_cpu.yaml", "--data-root", str(tmp_path / "nowhere"),
               "--out", str(tmp_path / "o")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "nowhere" in line and "does not exist" in line and "ssl-bench data synth" in line
    assert not (tmp_path / "o").exists()
