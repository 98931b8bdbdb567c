"""image_retrieval and copy_detection on SynthScenes tiny, the search's streaming and half-precision
bank, and bad inputs (each one DataError / ConfigError; on the command line one `error:` line,
exit 2, no record). Parity with the official code: benchmarks/retrieval/tests/test_retrieval_parity.py."""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.retrieval.copy_detection import CopyDetection
from benchmarks.retrieval.image_retrieval import ImageRetrieval
from benchmarks.retrieval.search import Bank, labelled_ranks, ranks_of, top_k
from benchmarks.retrieval.synthetic import generate
from harness.cli import main
from harness.errors import ConfigError, DataError
from harness.models.handle import ModelHandle
from harness.per_image import decode_array
from harness.results.bootstrap import record_intervals


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("rsynth") / "tiny", preset="tiny", seed=0, progress=False)


@pytest.fixture(scope="module")
def model():
    return ModelHandle.random_init("vit_cpu_tiny", seed=0)


def _copy(synth: Path, tmp_path: Path, what: str) -> Path:
    root = tmp_path / "data"
    shutil.copytree(synth / what, root / what)
    return root


def test_generate_is_idempotent_and_refuses_other_data(synth, tmp_path):
    stamp = (synth / "roxford5k" / "gnd_roxford5k.pkl").stat().st_mtime_ns
    assert generate(synth, preset="tiny", seed=0) == synth
    assert (synth / "roxford5k" / "gnd_roxford5k.pkl").stat().st_mtime_ns == stamp
    with pytest.raises(DataError, match="another data set"):
        generate(synth, preset="tiny", seed=1)


def test_image_retrieval_on_synthscenes(synth, model, isolated_home):
    (r,) = ImageRetrieval.from_preset("synth", {"progress": False}).run(model, synth)
    assert set(r.metrics) == {"mAP_E", "mAP_M", "mAP_H"}
    assert all(0.0 <= v <= 100.0 for v in r.metrics.values())
    values = decode_array(r.per_image["values"])
    assert values.shape == (r.params["n_queries"], 3)
    assert np.allclose(100.0 * values.mean(axis=0), [r.metrics[m] for m in r.per_image["metrics"]])
    bands = record_intervals("synth", r.per_image, list(r.metrics))  # every cell gets its 95% interval
    assert set(bands) == set(r.metrics)
    assert all(bands[m].low <= r.metrics[m] + 1e-9 and r.metrics[m] <= bands[m].high + 1e-9 for m in bands)
    # the half-precision bank ranks these queries as the float32 one does: the same scores
    (h,) = ImageRetrieval.from_preset("synth", {"progress": False, "bank_dtype": "float16"}).run(model, synth)
    assert h.metrics == r.metrics


def test_distractors_join_the_database(synth, model, isolated_home):
    base = {"progress": False}
    (plain,) = ImageRetrieval.from_preset("synth", base).run(model, synth)
    (more,) = ImageRetrieval.from_preset("synth", {**base, "distractors": "distractors", "max_distractors": 5}
                                         ).run(model, synth)
    assert more.params["n_distractors"] == 5
    assert all(more.metrics[m] <= plain.metrics[m] + 1e-9 for m in plain.metrics)


def test_copy_detection_on_synthscenes(synth, model, isolated_home):
    (r,) = CopyDetection.from_preset("synth", {"progress": False}).run(model, synth)
    assert 0.0 <= r.metrics["mAP_strong"] <= 100.0
    assert r.params["mAP_per_block"]["original"] == pytest.approx(100.0)  # an original finds itself
    assert decode_array(r.per_image["values"]).shape == (10, 1)  # 5 originals x 2 strong copies
    assert set(record_intervals("synth", r.per_image, ["mAP_strong"])) == {"mAP_strong"}
    (h,) = CopyDetection.from_preset("synth", {"progress": False, "bank_dtype": "float16"}).run(model, synth)
    assert h.metrics == r.metrics


def test_streamed_ranks_and_top_k_equal_a_full_sort():
    g = torch.Generator().manual_seed(0)
    bank = torch.nn.functional.normalize(torch.randn(500, 16, generator=g), dim=1)
    queries = torch.nn.functional.normalize(torch.randn(7, 16, generator=g), dim=1).numpy()
    bank_np = bank.numpy().copy()
    bank_np[10] = bank_np[3]  # a tie: broken by index
    b = Bank.build(bank_np, "float32")
    b.block = 64
    full = np.argsort(-(queries @ bank_np.T), axis=1, kind="stable")
    items = [np.arange(500)] * 7
    for q, ranks in enumerate(labelled_ranks(b, queries, items, chunk=3)):
        assert [ranks[i] for i in full[q]] == list(range(500))
    _, ids = top_k(b, queries, 20, chunk=2)
    assert np.array_equal(ids, full[:, :20])
    row = torch.tensor([0.5, 0.9, 0.5, 0.1])
    assert ranks_of(row, torch.tensor([0, 1, 2, 3])).tolist() == [1, 0, 2, 3]


def test_ranks_with_many_ties_equal_a_stable_sort():
    g = torch.Generator().manual_seed(1)
    for n, levels in ((1, 3), (50, 4), (2000, 7), (2000, 10**6)):
        row = torch.randint(0, levels, (n,), generator=g).float()
        items = torch.randperm(n, generator=g)[:37]
        order = torch.sort(row, descending=True, stable=True).indices
        rank = torch.empty_like(order)
        rank[order] = torch.arange(n)
        assert torch.equal(ranks_of(row, items), rank[items])


def test_half_bank_streams_in_blocks_on_the_cpu():
    x = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    b = Bank.build(x, "float16")
    b.block = 128
    q = torch.as_tensor(x[:4])
    assert torch.allclose(b.scores(q), q @ torch.as_tensor(x).half().float().T, atol=1e-5)


# ----------------------------------------------------------------------------- bad inputs
def _gnd(root: Path) -> tuple[Path, dict]:
    path = root / "roxford5k" / "gnd_roxford5k.pkl"
    return path, pickle.loads(path.read_bytes())


def test_missing_ground_truth(synth, model, tmp_path):
    root = _copy(synth, tmp_path, "roxford5k")
    (root / "roxford5k" / "gnd_roxford5k.pkl").unlink()
    with pytest.raises(DataError, match="gnd_roxford5k.pkl not found"):
        ImageRetrieval.from_preset("synth").run(model, root)


def test_ground_truth_naming_missing_images(synth, model, tmp_path):
    root = _copy(synth, tmp_path, "roxford5k")
    path, cfg = _gnd(root)
    cfg["imlist"].append("not_there")
    path.write_bytes(pickle.dumps(cfg))
    with pytest.raises(DataError, match="does not match the images"):
        ImageRetrieval.from_preset("synth").run(model, root)


def test_ground_truth_index_outside_the_database(synth, model, tmp_path):
    root = _copy(synth, tmp_path, "roxford5k")
    path, cfg = _gnd(root)
    cfg["gnd"][0]["easy"] = np.array([len(cfg["imlist"]) + 3])
    path.write_bytes(pickle.dumps(cfg))
    with pytest.raises(DataError, match="outside the .* images of imlist"):
        ImageRetrieval.from_preset("synth").run(model, root)


def test_query_box_outside_the_image(synth, model, tmp_path):
    root = _copy(synth, tmp_path, "roxford5k")
    path, cfg = _gnd(root)
    cfg["gnd"][1]["bbx"] = [10, 10, 500, 40]
    path.write_bytes(pickle.dumps(cfg))
    with pytest.raises(DataError, match="lies outside the 80x60 image"):
        ImageRetrieval.from_preset("synth").run(model, root)


def test_image_smaller_than_a_patch(synth, model, isolated_home):
    with pytest.raises(ConfigError, match="smaller than the model's patch size 8"):
        ImageRetrieval.from_preset("synth", {"imsize": 4}).run(model, synth)


def test_copydays_strong_copy_without_original(synth, model, tmp_path):
    root = _copy(synth, tmp_path, "copydays")
    strong = sorted((root / "copydays" / "strong").iterdir())[0]
    strong.rename(strong.with_name("9999" + strong.name[4:]))
    with pytest.raises(DataError, match="no original with the same 4-character prefix"):
        CopyDetection.from_preset("synth", {"whitening": None, "distractors": None}).run(model, root)


def test_copydays_missing_whitening_folder(synth, model, tmp_path):
    root = _copy(synth, tmp_path, "copydays")
    with pytest.raises(DataError, match="whitening folder .* not found"):
        CopyDetection.from_preset("synth").run(model, root)


def _no_records(home: Path) -> bool:
    runs = home / "results" / "runs"
    return not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("protocol,dataset,breakage", [
    ("image_retrieval", "roxford5k", "pkl"), ("image_retrieval", "roxford5k", "box"),
    ("copy_detection", "copydays", "block")])
def test_cli_bad_layout_is_one_error_line(protocol, dataset, breakage, synth, isolated_home, capsys):
    root = isolated_home / "data"
    shutil.copytree(synth, root)
    if breakage == "pkl":
        (root / "roxford5k" / "gnd_roxford5k.pkl").unlink()
    elif breakage == "box":
        path, cfg = _gnd(root)
        cfg["gnd"][0]["bbx"] = [-5, 0, 20, 20]
        path.write_bytes(pickle.dumps(cfg))
    else:
        next((root / "copydays" / "crops" / "50").iterdir()).unlink()
    rc = main(["--threads", "1", "eval", "--protocol", protocol, "--preset", "synth", "--dataset", dataset,
               "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:"), err
    assert _no_records(isolated_home / "home") and _no_records(isolated_home)
