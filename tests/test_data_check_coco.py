"""`ssl-bench data check coco:instances` on COCO 2017 in its official layout (tests/official_archives.py):
a root with the official 118,287 / 5,000 images (hard links, slow) is ready, exit 0; a tiny root's only
problems are its sizes; a root
without an annotation file, one whose JSON lists an absent image, and (with --deep) one with a
truncated image each get exit 2 and the reason named, on one screen."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.data.check import check_root
from official_archives import write_coco2017

OFFICIAL = {"train2017": 118_287, "val2017": 5_000}
SCREEN = 25  # lines


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco2017")
    write_coco2017(root, OFFICIAL)
    return root


def _check(root, capsys, *extra) -> tuple[int, str]:
    code = main(["data", "check", "coco:instances", "--data-root", str(root), *extra])
    out = capsys.readouterr().out
    assert len(out.splitlines()) <= SCREEN, out
    return code, out


@pytest.mark.slow  # 123,287 files and their JSON: ~25 s on a shared machine
def test_official_layout_is_ready(coco, capsys):
    code, out = _check(coco, capsys)
    assert code == 0, out
    assert "split train2017: 118,287 images, 80 classes (ok)" in out
    assert "split val2017: 5,000 images, 80 classes (ok)" in out


def _tiny(root) -> tuple[dict, list[str]]:
    """A root of 3 / 2 images: whose only problems are the sizes against the official ones."""
    files = write_coco2017(root, {"train2017": 3, "val2017": 2})
    size_only = check_root("coco:instances", root, deep=True).problems
    assert len(size_only) == 2 and all("official" in p for p in size_only), size_only
    return files, size_only


def test_missing_annotation_file_and_absent_image_are_named(tmp_path, capsys):
    files, size_only = _tiny(tmp_path)
    (tmp_path / "annotations" / "instances_val2017.json").unlink()
    code, out = _check(tmp_path, capsys)
    assert code == 2 and "split val2017: MISSING" in out and "instances_val2017.json" in out
    files, size_only = _tiny(tmp_path / "again")
    gone = files["train2017"][1]
    gone.unlink()
    code, out = _check(tmp_path / "again", capsys)
    assert code == 2 and "split train2017: BROKEN" in out and "image id(s) 2" in out


def test_deep_names_a_truncated_image(tmp_path, capsys):
    files, size_only = _tiny(tmp_path)
    bad = files["val2017"][1]
    data = bad.read_bytes()
    bad.unlink()  # the images are hard links of one file: cut this one alone
    bad.write_bytes(data[: len(data) // 2])
    code, out = _check(tmp_path, capsys, "--deep")
    assert code == 2 and "1 unreadable" in out and bad.name in out
    assert check_root("coco:instances", tmp_path).problems == size_only  # without --deep it is not seen
