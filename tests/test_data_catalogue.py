"""`ssl-bench data list` and `data check`: the catalogue covers every reader, names its readers from
the declarations, and a root is checked against the layout and official sizes (exit 0 ready, 2 not)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

from harness.cli import main
from harness.data.catalogue import alias_note, catalogue, describe, protocols_reading, resolve
from harness.data.check import check_root
from harness.errors import ConfigError
from harness.registry import DATASETS, protocol_declarations

ROOT = Path(__file__).resolve().parents[1]


def test_every_registered_reader_is_a_layout_of_one_catalogued_data_set():
    import harness.data  # noqa: F401 (registers the core readers; the protocol folders' are declared)

    readers = catalogue().readers()
    declared = {k for d in protocol_declarations().values() for k in (*d.datasets, *d.reads)}
    registered = {name for name in readers if DATASETS.known(name)}
    assert sorted(declared - set(readers)) == []
    assert sorted({"voc", "ade20k", "imagenet", "imagefolder", "nyu", "davis2017"} - registered) == []
    # 41 + the fine-tuning sets (CIFAR x2, iNat x2, Flowers, Cars) + COCO instances
    assert len(registered) == len(readers) == 48


@pytest.mark.slow
def test_every_reader_importable_is_catalogued():
    assert sorted(set(DATASETS.names()) - set(catalogue().readers())) == []


def test_readers_come_from_the_declarations_and_old_keys_are_layouts():
    voc = catalogue().datasets["voc"]
    readers = protocols_reading(voc)
    assert "seg_linear" in readers and "lost" in readers  # lost through the boxes layout (voc12)
    ds, layout = resolve("voc12aug")
    assert (ds.key, layout.name) == ("voc", "aug")
    assert resolve("voc:aug")[1].reader == "voc12aug"
    assert "'aug' layout of data set 'voc'" in alias_note("voc12aug")
    assert alias_note("voc") is None
    with pytest.raises(ConfigError, match="data list"):
        resolve("no_such_set")


def test_official_sizes_of_the_issue_are_listed():
    text = "\n".join(line for ds in catalogue().datasets.values() for line in describe(ds))
    for fact in ("val 50,000 images, 1,000 classes", "trainaug 10,582", "validation 2,000", "test 654",
                 "val 30 sequences", "query 70 queries; database 4,993", "database 157"):
        assert fact in text


def test_datasets_page_shows_the_current_list(capsys):
    """docs/DATASETS.md holds `ssl-bench data list` as it prints now."""
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out.strip()
    page = (ROOT / "docs" / "DATASETS.md").read_text()
    block = re.search(r"<!-- data list -->\n```\n(.*?)\n```", page, re.S)
    assert block is not None, "docs/DATASETS.md lost its `data list` block"
    assert block.group(1).strip() == out, "run `python -m scripts.update_data_list_doc`"


@pytest.fixture
def synth_copy(synth_tiny, tmp_path) -> Path:
    root = tmp_path / "synth"
    shutil.copytree(synth_tiny, root)
    return root


def test_synthscenes_root_is_ready_with_synthetic_sizes(synth_tiny, capsys):
    assert main(["data", "check", "voc", "--data-root", str(synth_tiny)]) == 0
    out = capsys.readouterr().out
    assert "sizes synthetic" in out and "official 1,464" in out and "READY" in out


def test_official_root_with_wrong_sizes_is_not_ready(synth_copy, capsys):
    (synth_copy / "meta.json").unlink()  # no longer a SynthScenes root: official sizes apply
    assert main(["data", "check", "ade20k", "--data-root", str(synth_copy)]) == 2
    out = capsys.readouterr().out
    assert "DOES NOT MATCH official 20,210 / 150 classes" in out and "NOT READY" in out


def test_broken_masks_are_named(synth_copy, capsys):
    voc = synth_copy / "VOC2012" / "SegmentationClass"
    first, second = sorted(voc.glob("val_*.png"))[:2]
    Image.new("P", (10, 10)).save(first)            # wrong size
    Image.new("RGB", (64, 64)).save(second)         # a colour mask
    assert main(["data", "check", "voc", "--data-root", str(synth_copy)]) == 2
    out = capsys.readouterr().out
    assert "1 masks differ in size from their image" in out and first.name in out
    assert "mode RGB" in out


def test_deep_check_lists_truncated_images(synth_copy, capsys):
    jpg = sorted((synth_copy / "VOC2012" / "JPEGImages").glob("val_*.jpg"))[0]
    data = jpg.read_bytes()
    jpg.write_bytes(data[: len(data) * 2 // 3])  # the header stays readable
    assert main(["data", "check", "voc", "--data-root", str(synth_copy)]) == 0  # headers only
    capsys.readouterr()
    assert main(["data", "check", "voc", "--data-root", str(synth_copy), "--deep"]) == 2
    assert "unreadable" in capsys.readouterr().out


def test_missing_split_and_missing_root(tmp_path, capsys):
    report = check_root("davis2017", tmp_path)
    assert not report.ready and "split val: MISSING" in report.text()
    assert main(["data", "check", "nyu", "--data-root", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().out


def test_unknown_key_is_one_error_line(tmp_path, capsys):
    assert main(["data", "check", "nope", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown data set 'nope'")


def test_synth_for_a_protocol_is_found_from_help_and_writes_the_set_it_reads(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["data", "synth", "--help"])
    assert exit_.value.code == 0
    assert "--for PROTOCOL" in capsys.readouterr().out
    out = tmp_path / "nyu_synth"
    assert main(["data", "synth", "--for", "depth_linear", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 0
    assert main(["data", "check", "nyu", "--data-root", str(out)]) == 0
    assert "READY" in capsys.readouterr().out


def test_synth_for_a_protocol_without_a_set_is_one_error_line(tmp_path, capsys):
    assert main(["data", "synth", "--for", "knn", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "declares no SynthScenes data set" in err[0]


def test_a_protocols_data_error_ends_with_its_data_check_command(synth_tiny):
    from harness.data.check import hint
    from harness.errors import DataError
    from harness.protocol_info import build_protocol
    from harness.running.evaluate import with_check_hint

    protocol = build_protocol("depth_linear", "synth", {"dataset": "nyu"})
    exc = with_check_hint(DataError("NYU split file x not found"), protocol, synth_tiny)
    assert str(exc).endswith(hint("nyu", synth_tiny)) and "ssl-bench data check nyu --data-root" in str(exc)
    assert str(with_check_hint(exc, protocol, synth_tiny)) == str(exc)  # appended once
