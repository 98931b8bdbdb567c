"""Any classification protocol's training set can be a named subset (harness.data.subsets): k-NN
and the linear probe as logistic regression (the logreg protocol's own tests). The subset restricts the
training split, enters the fingerprint and the record, keys the feature cache, leaves every
request without one as it was, and a bad list is one error line with no record."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.models.handle import ModelHandle
from harness.registry import PROTOCOLS

SETTINGS = {"knn": {"ks": [1], "resize": 32, "crop": 32},
            "linear": {"cached_features": True, "epochs": 1, "resize": 32, "crop": 32}}


def _subset(root: Path, path: Path, per_class: int = 1) -> list[str]:
    by_class: dict[str, list[str]] = {}
    for p in sorted((root / "train").rglob("*.jpg")):
        by_class.setdefault(p.parent.name, []).append(p.name)
    names = [n for files in by_class.values() for n in files[:per_class]]
    path.write_text("\n".join(names) + "\n")
    return names


@pytest.mark.parametrize("name", ["knn", "linear"])
def test_a_subset_restricts_training_and_is_in_fingerprint_and_record(name, synth_tiny, isolated_home):
    root = synth_tiny / "imagenet"
    listed = _subset(root, isolated_home / "one_per_class.txt")
    base = {"dataset": "imagefolder", "progress": False, **SETTINGS[name]}
    cls = PROTOCOLS.get(name)
    whole = cls.from_preset("synth", base)
    proto = cls.from_preset("synth", {**base, "train_subset": str(isolated_home / "one_per_class.txt")})
    assert proto.fingerprint() != whole.fingerprint()
    assert cls.from_preset("synth", {**base, "train_subset": ""}).request_hash() == whole.request_hash()
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    [result, *_] = proto.run(model, root)
    assert result.params["n_train"] == len(listed)
    assert result.params["train_subset"] == "one_per_class" and len(result.params["train_subset_file_sha256"]) == 64
    [full, *_] = whole.run(model, root)
    assert full.params["n_train"] > len(listed) and "train_subset" not in full.params


def test_a_bad_subset_is_one_error_line_and_no_record(synth_tiny, isolated_home, capsys):
    bad = isolated_home / "bad.txt"
    bad.write_text("n01440764_10026.JPEG\n")
    for name in ("knn", "linear"):
        rc = main(["--threads", "1", "eval", "--protocol", name, "--preset", "synth", "--dataset", "imagefolder",
                   "--data-root", str(synth_tiny / "imagenet"), "--random-init", "vit_cpu_tiny",
                   "--set", "progress=false", "--set", f"train_subset={bad}"])
        err = capsys.readouterr().err
        assert rc == 2 and len([x for x in err.splitlines() if x.startswith("error:")]) == 1, err
        assert "not in the training split" in err
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def _fake_simclr(tmp_path: Path, monkeypatch, text: str) -> Path:
    """A checkout holding a list, and KNOWN naming that list's bytes (the real lists are not in the repository)."""
    import hashlib

    from harness.data import subsets

    checkout = tmp_path / "simclr"
    (checkout / "imagenet_subsets").mkdir(parents=True)
    (checkout / "imagenet_subsets" / "1percent.txt").write_text(text)
    known = subsets.KnownSubset("imagenet_subsets/1percent.txt", hashlib.sha256(text.encode()).hexdigest(),
                                len(text.splitlines()))
    monkeypatch.setitem(subsets.KNOWN, "imagenet_1pct", known)
    return checkout


def test_known_lists_are_pinned_to_simclr_with_their_sha256():
    from harness.data.subsets import KNOWN, SIMCLR_COMMIT

    assert {k: (v.images, v.url.endswith(v.source_path)) for k, v in KNOWN.items()} == {
        "imagenet_1pct": (12811, True), "imagenet_10pct": (128116, True)}
    assert all(SIMCLR_COMMIT in v.url and len(v.sha256) == 64 for v in KNOWN.values())


def test_get_subsets_installs_a_checked_list_and_train_subset_finds_it(tmp_path, isolated_home, monkeypatch):
    from harness.data.subsets import resolve
    from scripts.get_subsets import main as get_subsets

    checkout = _fake_simclr(tmp_path, monkeypatch, "a_1.JPEG\nb_2.JPEG\n")
    assert get_subsets(["--simclr", str(checkout), "--only", "imagenet_1pct"]) == 0
    subset = resolve("imagenet_1pct")
    assert subset.names == {"a_1.JPEG", "b_2.JPEG"} and subset.path.parent == isolated_home / "home" / "subsets"


def test_an_edited_known_list_is_refused(tmp_path, isolated_home, monkeypatch, capsys):
    from harness.data.subsets import resolve
    from harness.errors import DataError
    from scripts.get_subsets import main as get_subsets

    checkout = _fake_simclr(tmp_path, monkeypatch, "a_1.JPEG\nb_2.JPEG\n")
    (checkout / "imagenet_subsets" / "1percent.txt").write_text("a_1.JPEG\n")  # truncated
    assert get_subsets(["--simclr", str(checkout), "--only", "imagenet_1pct"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "is not SimCLRv2's" in err
    installed = isolated_home / "home" / "subsets"
    assert not installed.exists()  # nothing written
    installed.mkdir(parents=True)
    (installed / "imagenet_1pct.txt").write_text("a_1.JPEG\n")
    with pytest.raises(DataError, match="is not SimCLRv2's"):
        resolve("imagenet_1pct")
    assert get_subsets(["--simclr", str(tmp_path / "nowhere")]) == 2
    assert "has no imagenet_subsets" in capsys.readouterr().err
