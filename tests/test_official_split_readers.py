"""The fine-tuning transfer readers (harness/data: cifar, inaturalist, flowers102, stanford_cars) on tiny
data sets in the official formats (tests/official_split_fixtures.py), and one DataError per bad root."""
from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from harness.errors import DataError
from harness.registry import DATASETS
from official_split_fixtures import (
    CARS_RECORDS, FLOWERS_LABELS, FLOWERS_SETID, INAT_SPLITS, write_cars, write_cifar10, write_cifar100,
    write_flowers, write_inat,
)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------- CIFAR
def test_cifar10_reads_batches_in_order(tmp_path):
    root = write_cifar10(tmp_path)
    train, test = DATASETS.get("cifar10")(root, "train"), DATASETS.get("cifar10")(root, "test")
    assert len(train) == 15 and len(test) == 3 and train.num_classes == 10 and train.classes[0] == "airplane"
    with open(root / "cifar-10-batches-py" / "data_batch_2", "rb") as f:
        batch = pickle.load(f, encoding="latin1")
    # image 4 is batch 2's second row: channel-major (3, 32, 32) -> HWC, as torchvision reshapes it
    want = batch["data"][1].reshape(3, 32, 32).transpose(1, 2, 0)
    assert np.array_equal(np.asarray(train.load_image(4)), want) and train.targets[4] == batch["labels"][1]
    img, label = test[0]
    assert img.size == (32, 32) and img.mode == "RGB" and 0 <= label < 10
    assert train.fingerprint() != test.fingerprint() and len(train.content_stamp()) == 24


def test_cifar100_uses_fine_labels(tmp_path):
    root = write_cifar100(tmp_path)
    ds = DATASETS.get("cifar100")(root, "train")
    with open(root / "cifar-100-python" / "train", "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    assert ds.num_classes == 100 and ds.targets == entry["fine_labels"] and ds.classes[3] == "fine3"


def test_cifar_bad_roots(tmp_path):
    root = write_cifar10(tmp_path / "a")
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3 not found") as exc:
        DATASETS.get("cifar10")(root, "train")
    _one_line(exc)
    root = write_cifar100(tmp_path / "b")
    meta = root / "cifar-100-python" / "meta"
    with open(meta, "wb") as f:
        pickle.dump({"fine_label_names": ["only", "two"]}, f, protocol=2)
    with pytest.raises(DataError, match="out of range") as exc:
        DATASETS.get("cifar100")(root, "test")
    _one_line(exc)
    with open(meta, "wb") as f:  # a pickle that would call a function when loaded
        pickle.dump({"x": print}, f, protocol=2)
    with pytest.raises(DataError, match="not a CIFAR python pickle"):
        DATASETS.get("cifar100")(root, "test")


# ----------------------------------------------------------------------------- iNaturalist
@pytest.mark.parametrize("year", [2018, 2019])
def test_inat_labels_follow_first_appearance_in_train(tmp_path, year):
    root = write_inat(tmp_path, year)
    train, val = DATASETS.get(f"inat{year}")(root, "train"), DATASETS.get(f"inat{year}")(root, "val")
    # train's categories appear as 2, 0, 2, 1: classes in that order, not by category id
    assert train.classes == ["Dus eus", "Aus bus", "Aus cus"]
    order = {2: 0, 0: 1, 1: 2}
    assert train.targets == [order[c] for _, c in INAT_SPLITS["train"]]
    assert val.targets == [order[c] for _, c in INAT_SPLITS["val"]] and val.classes == train.classes
    assert val.image_paths[0] == root / f"train_val{year}" / "Plantae" / "1" / "0020abcd.jpg"
    assert val[0][0].size == (8, 8)
    genus = DATASETS.get(f"inat{year}")(root, "train", category="genus")
    assert genus.classes == ["Dus", "Aus"] and genus.targets == [0, 1, 0, 1]
    assert genus.fingerprint() != train.fingerprint()


def test_inat_bad_roots(tmp_path):
    reader = DATASETS.get("inat2018")
    root = write_inat(tmp_path / "a", 2018)
    (root / "categories.json").unlink()
    with pytest.raises(DataError, match="categories.json not found") as exc:
        reader(root, "train")
    _one_line(exc)
    root = write_inat(tmp_path / "b", 2018)
    doc = json.loads((root / "val2018.json").read_text())
    doc["annotations"] = doc["annotations"][1:]  # image 20 loses its annotation
    (root / "val2018.json").write_text(json.dumps(doc))
    with pytest.raises(DataError, match="image id 20 .* has no annotation") as exc:
        reader(root, "val")
    _one_line(exc)
    root = write_inat(tmp_path / "c", 2018)
    cats = json.loads((root / "categories.json").read_text())[:2]  # category 2 no longer exists
    (root / "categories.json").write_text(json.dumps(cats))
    with pytest.raises(DataError, match="category 2 is out of range") as exc:
        reader(root, "train")
    _one_line(exc)


# ----------------------------------------------------------------------------- Flowers-102
def test_flowers_trainval_is_trnid_then_valid(tmp_path):
    root = write_flowers(tmp_path / "flowers-102")
    reader = DATASETS.get("flowers102")
    trainval, test = reader(root, "trainval"), reader(root, "test")
    ids = FLOWERS_SETID["trnid"] + FLOWERS_SETID["valid"]
    assert [p.name for p in trainval.image_paths] == [f"image_{i:05d}.jpg" for i in ids]
    assert trainval.targets == [FLOWERS_LABELS[i - 1] - 1 for i in ids] and trainval.num_classes == 3
    assert len(test) == len(FLOWERS_SETID["tstid"])
    nested = reader(tmp_path, "test")  # torchvision's <root>/flowers-102/ form
    assert nested.targets == test.targets


def test_flowers_bad_roots(tmp_path):
    root = write_flowers(tmp_path / "a")
    (root / "jpg" / "image_00000_extra.jpg").write_bytes(b"")  # would shift every label in the official reader
    with pytest.raises(DataError, match="holds 11 files for the 10 labels") as exc:
        DATASETS.get("flowers102")(root, "trainval")
    _one_line(exc)
    root = write_flowers(tmp_path / "b")
    (root / "setid.mat").unlink()
    with pytest.raises(DataError, match="setid.mat not found"):
        DATASETS.get("flowers102")(root, "test")


# ----------------------------------------------------------------------------- Stanford Cars
def test_cars_annos_split_labels_and_official_head(tmp_path):
    root = write_cars(tmp_path)
    reader = DATASETS.get("cars_annos")
    train, test = reader(root, "train"), reader(root, "test")
    assert [t + 1 for t in train.targets] == [c for c, t, _ in CARS_RECORDS if t == 0]
    assert [t + 1 for t in test.targets] == [c for c, t, _ in CARS_RECORDS if t == 1]
    assert train.classes[0] == "Make Model 1" and train.num_classes == 4
    assert test.image_paths[0].name == "000005.jpg"
    # the official head: distinct bbox_y2 values of the training records (100, 120, 130)
    assert train.official_num_outputs == test.official_num_outputs == 3 and train.official_label_offset == 1


def test_cars_bad_root(tmp_path):
    with pytest.raises(DataError, match="cars_annos.mat not found") as exc:
        DATASETS.get("cars_annos")(tmp_path, "train")
    _one_line(exc)
    root = write_cars(tmp_path / "b")
    (root / "car_ims" / "000001.jpg").unlink()
    with pytest.raises(DataError, match="000001.jpg .* does not exist"):
        DATASETS.get("cars_annos")(root, "train")


# ----------------------------------------------------------------------------- through the CLI
def test_bad_root_is_one_error_line_through_the_cli(isolated_home, tmp_path, capsys):
    from harness.cli import main

    root = write_inat(tmp_path / "inat", 2019)
    doc = json.loads((root / "val2019.json").read_text())
    doc["annotations"] = doc["annotations"][1:]
    (root / "val2019.json").write_text(json.dumps(doc))
    rc = main(["--threads", "1", "features", "--dataset", "inat2019", "--data-root", str(root), "--split", "val",
               "--random-init", "vit_cpu_tiny"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "has no annotation" in err[0]


# ----------------------------------------------------------------------------- against the official classes
OFFICIAL = json.loads((Path(__file__).parent / "fixtures" / "official_split_readers.json").read_text())["cases"]


def test_readers_match_the_official_classes(tmp_path):
    """Samples and labels as bytedance/ibot eval_cls.py's INatDataset, CarsDataset, FlwrsDataset and
    torchvision's CIFAR classes give them on the same files (tests/reference/gen_official_split_readers.py)."""
    roots = {"inat2018": write_inat(tmp_path / "inat2018", 2018), "inat2019": write_inat(tmp_path / "inat2019", 2019),
             "cars_annos": write_cars(tmp_path / "cars"), "flowers102": write_flowers(tmp_path / "flwrs"),
             "cifar10": write_cifar10(tmp_path / "cifar10"), "cifar100": write_cifar100(tmp_path / "cifar100")}
    for case, want in OFFICIAL.items():
        name, split = case.split("/")
        ds = DATASETS.get(name)(roots[name], split)
        if name.startswith("cifar"):
            pixels = np.stack([np.asarray(ds.load_image(i)) for i in range(len(ds))])
            assert ds.targets == want["targets"] and ds.classes == want["classes"], case
            assert hashlib.sha256(pixels.tobytes()).hexdigest() == want["pixels_sha256"], case
            continue
        offset = getattr(ds, "official_label_offset", 0)
        got = [[p.relative_to(roots[name]).as_posix(), t + offset] for p, t in ds.samples]
        assert got == want["samples"], case
        assert getattr(ds, "official_num_outputs", ds.num_classes) == want["nb_classes"], case
