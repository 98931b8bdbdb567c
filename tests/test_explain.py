"""`ssl-bench explain A B`: every setting that differs between two records (or a record and a
paper cell) with whether it can change the number; records built as the harness writes them
(a registered protocol's settings, fingerprint and request; cost and provenance blocks)."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.errors import ConfigError
from harness.models.zoo import load_zoo
from harness.paper.spec import load_table
from harness.protocol_info import build_protocol
from harness.results.explain import MAY, NO, UNSTATED, YES, explain, record_side, resolve_sides
from harness.results.records import make_record, write_record


def _knn_block(values: dict | None = None, dataset: str = "synth_background", data_root: str = "/data/synth",
               stamp: str = "stamp-1", preset: str = "synth", reported: dict | None = None) -> dict:
    """A knn record's protocol block as harness.running.evaluate writes it: the settings in the
    fingerprint, then what the run reported (``reported`` on top)."""
    proto = build_protocol("knn", preset, {"dataset": dataset, **(values or {})})
    return {"name": "knn", "preset": preset, "dataset": dataset, "split": "val",
            "params": {**proto.settings(), "n_train": 990, "n_val": 188, "k_used": 20, "search_device": "cpu",
                       "feature_seconds": 0.08, **(reported or {})},
            "fingerprint": proto.fingerprint(), "request": proto.request_hash(), "data_root": data_root,
            "data_stamp": stamp}


def _model(name: str = "synth_cribo", sha: str | None = None, **extra) -> dict:
    sha = sha or load_zoo()[name].sha256
    return {"name": name, "method": "cribo", "arch": "vit_cpu_tiny", "patch_size": 8, "epochs": 18,
            "pretrain_data": "synthscenes-small-s0-v2", "checkpoint": f"/zoo/{name}.safetensors",
            "checkpoint_sha256": sha, "weights_key": sha, "init_seed": None, "reg_tokens": 0,
            "pos_interp": "official", **extra}


def _cost(device_type: str = "cpu") -> dict:
    return {"wall_s": 1.0, "peak_rss_mb": 900.0, "device": device_type, "device_type": device_type,
            "precision": "fp32", "world_size": 1, "gpu": "NVIDIA H200" if device_type == "cuda" else None,
            "cpu": "x86_64", "threads": 2}


def _record(model: dict | None = None, protocol: dict | None = None, seed=None, variant=None, top1: float = 77.1,
            cost: dict | None = None, torch_version: str | None = None) -> dict:
    rec = make_record(model or _model(), protocol or _knn_block(), seed, variant or {"k": 20, "feature": "cls"},
                      {"top1": top1, "top5": 99.0}, cost or _cost())
    if torch_version:
        rec["provenance"]["torch"] = torch_version
    return rec


def _by_setting(diffs) -> dict[str, str]:
    return {d.setting: d.effect for d in diffs}


def test_settings_sorted_by_whether_they_change_the_number():
    a = _record()
    b = _record(protocol=_knn_block({"temperature": 0.1}, data_root="/elsewhere/synth",
                                    reported={"search_device": "cuda", "feature_seconds": 0.01}),
                cost=_cost("cuda"), torch_version="9.9.9", top1=75.0)
    diffs, reported = explain(record_side(a), record_side(b))
    got = _by_setting(diffs)
    assert got["temperature"] == YES and got["fingerprint"] == YES  # in the fingerprint
    assert got["search_device"] == NO  # NOT_IN_FINGERPRINT (execution only), as the run reported it
    assert got["data_root"] == NO  # the same stamp: the same generated data elsewhere
    assert got["device_type"] == MAY and got["gpu"] == MAY and got["torch"] == MAY
    assert "weights" not in got and "seed" not in got and not any(s.startswith("variant") for s in got)
    assert reported == []  # the runs reported the same counts; timings are never listed


def test_mask_resolution_and_input_size_of_dense_nn_change_the_number():
    """The causes users found by hand (valeoai/Franca#2: the masks' resolution) are settings in the
    fingerprint: listed as changing the number."""
    def block(values):
        proto = build_protocol("dense_nn", "cribo", {"dataset": "voc", **values})
        return {"name": "dense_nn", "preset": "cribo", "dataset": "voc", "split": "val", "params": proto.settings(),
                "fingerprint": proto.fingerprint(), "request": proto.request_hash(), "data_root": "/data/voc",
                "data_stamp": "stamp-1"}

    a = _record(protocol=block({}), variant={"fraction": "1/1"})
    b = _record(protocol=block({"input_size": 448, "mask_resize": "torch_nearest"}), variant={"fraction": "1/1"})
    got = _by_setting(explain(record_side(a), record_side(b))[0])
    assert got["input_size"] == YES and got["mask_resize"] == YES and got["fingerprint"] == YES


def test_same_fingerprint_other_request_is_execution_only():
    a, b = _record(), _record(protocol=_knn_block({"batch_size": 7, "ks": [20]}))
    diffs, _ = explain(record_side(a), record_side(b))
    # execution settings are not in a record's params: the request hash alone tells them apart
    assert _by_setting(diffs) == {"request": NO}


def test_weights_data_seed_and_variant():
    other = "ab" * 32
    a = _record(seed=0)
    b = _record(model=_model("synth_dino", sha=other, method="dino"), protocol=_knn_block(stamp="stamp-2"),
                seed=1, variant={"k": 10, "feature": "cls"})
    b["protocol"]["params"]["n_train"] = 500
    settings, reported = explain(record_side(a), record_side(b))
    got = _by_setting(settings)
    assert [(d.setting, d.a, d.b) for d in reported] == [("n_train", 990, 500)]  # a consequence, listed apart
    assert got["weights"] == YES and got["method"] == YES and got["name"] == NO and got["checkpoint"] == NO
    assert got["data_stamp"] == YES and "data_root" not in got
    assert got["seed"] == YES and got["variant.k"] == YES
    same_weights = _record(model={**_model(), "checkpoint": "/copy/synth_cribo.safetensors", "name": "cribo_copy"})
    got = _by_setting(explain(record_side(a), record_side(same_weights))[0])
    assert got["checkpoint"] == NO and got["name"] == NO and "weights" not in got


def test_adapter_choices_change_the_number():
    adapter = {"adapter": "timm", "arch": "resnet18", "stride": 32, "layers": [4], "pooling": "avg"}
    a = _record(model=_model(adapter=adapter, spec="timm:resnet18"))
    b = _record(model=_model(adapter={**adapter, "layers": [3]}, spec="timm:resnet18,layers=3"))
    got = _by_setting(explain(record_side(a), record_side(b))[0])
    assert got["adapter.layers"] == YES and got["spec"] == YES


def test_fingerprint_beyond_the_recorded_settings_is_named():
    a, b = _record(), _record(protocol={**_knn_block(), "fingerprint": "f0" * 8})
    (d,) = [d for d in explain(record_side(a), record_side(b))[0] if d.setting == "fingerprint"]
    assert d.effect == YES and "only the hash holds" in d.why


def test_unregistered_protocol_may():
    block = {**_knn_block(), "name": "my_plugin"}
    a = _record(protocol=block)
    b = _record(protocol={**block, "params": {**block["params"], "temperature": 0.5}, "fingerprint": "e1" * 8})
    got = _by_setting(explain(record_side(a), record_side(b))[0])
    assert got["temperature"] == MAY and got["fingerprint"] == YES


def _table_knn_block(**values) -> dict:
    """The knn settings of the SynthScenes paper table (configs/paper/synthscenes.yaml)."""
    ps = load_table("synthscenes").spec.protocols["knn"]
    return _knn_block({**ps.values, **values}, preset=ps.preset)


def test_paper_cell_of_the_table_settings_and_checkpoint(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_record(_record(protocol=_table_knn_block()), runs)
    write_record(_record(protocol=_table_knn_block(), variant={"k": 10, "feature": "cls"}), runs)
    a, b = resolve_sides("synth_cribo", "synthscenes:3", runs)
    assert b.paper is not None and b.fingerprint == a.fingerprint and a.variant["k"] == 20  # the cell's k
    diffs, _ = explain(a, b)
    assert [d.effect for d in diffs] == [MAY]  # the table states no device or library versions
    assert main(["explain", "synth_cribo", "synthscenes:3", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "same protocol fingerprint" in out and "77.1277 published" in out


def test_paper_cell_other_settings_and_weights(tmp_path):
    runs = tmp_path / "runs"
    rec = _record(model=_model("synth_dino", sha=load_zoo()["synth_dino"].sha256, method="dino"),
                  protocol=_table_knn_block(temperature=0.1))
    path = write_record(rec, runs)
    a, b = resolve_sides(str(path), "synthscenes:3", runs)
    got = _by_setting(explain(a, b)[0])
    assert got["temperature"] == YES and got["fingerprint"] == YES
    assert got["model"] == YES and got["checkpoint_sha256"] == YES  # not the shipped synth_cribo file
    b2, a2 = resolve_sides("synthscenes:3", rec["id"][:8], runs)  # either side, an id prefix
    assert _by_setting(explain(b2, a2)[0]) == got


def test_paper_cell_other_data_set_sizes(tmp_path):
    runs = tmp_path / "runs"
    write_record(_record(protocol=_knn_block(preset="dino", dataset="imagenet")), runs)
    a, b = resolve_sides("synth_cribo", "dino-imagenet:1", runs, protocol="knn")
    got = _by_setting(explain(a, b)[0])
    assert got["n_train"] == YES and got["n_val"] == YES and got["model"] == YES


@pytest.mark.parametrize("spec_a,spec_b,expected", [
    ("no_such_model", "synthscenes:3", "'no_such_model' is no record file"),
    ("synth_cribo", "synthscenes:999", "no row '999'"),
    ("synth_cribo", "cribo-table2:1", "has no seg_linear record"),
    ("synthscenes:3", "dino-imagenet:1", "not two paper cells"),
    ("0123456789", "synthscenes:3", "'0123456789' is no record file"),
])
def test_unknown_sides_are_one_error_line(tmp_path, capsys, spec_a, spec_b, expected):
    runs = tmp_path / "runs"
    write_record(_record(protocol=_table_knn_block()), runs)
    with pytest.raises(ConfigError, match=expected):
        resolve_sides(spec_a, spec_b, runs)
    assert main(["explain", spec_a, spec_b, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0]


def _dense_block() -> dict:
    proto = build_protocol("dense_nn", "cribo", {"dataset": "voc"})
    return {"name": "dense_nn", "preset": "cribo", "dataset": "voc", "split": "val", "params": proto.settings(),
            "fingerprint": proto.fingerprint(), "request": proto.request_hash(), "data_root": "/data/voc",
            "data_stamp": "stamp-1"}


def test_two_model_names_compare_the_same_variant_and_seed(tmp_path):
    """A's newest record is seed 400 and B's seed 42: the pair compared is seed 400 of both."""
    runs = tmp_path / "runs"
    for name, seeds in (("synth_dino", (42, 400)), ("synth_ibot", (400, 42))):
        for i, seed in enumerate(seeds):
            for fraction in ("1/8", "1/1"):
                rec = _record(model=_model(name, method=name[6:]), protocol=_dense_block(), seed=seed,
                              variant={"fraction": fraction})
                rec["created"] = f"2026-01-01T00:00:0{i}"  # written in this order: the last is the newest
                write_record(rec, runs)
    a, b = resolve_sides("synth_dino", "synth_ibot", runs)
    assert a.seed == b.seed == 400 and a.variant == b.variant
    got = _by_setting(explain(a, b)[0])
    assert "seed" not in got and not any(k.startswith("variant") for k in got) and got["weights"] == YES


def test_a_setting_the_paper_cell_leaves_unstated_is_not_stated(tmp_path, capsys):
    """A cell without a checkpoint, a record of a patch size the table gives no input size for:
    the input size is "not stated", neither the table's nor a setting that changes the number."""
    from harness.paper.spec import spec_path
    from harness.paths import shipped

    src = spec_path("hbird-readme")
    table = tmp_path / "hbird-nozoo.yaml"
    table.write_text(src.read_text().replace("csv: hbird_readme.csv", "csv: hbird_nozoo.csv"))
    csv = shipped("results/paper/hbird_readme.csv").read_text().splitlines()
    (tmp_path / "hbird_nozoo.csv").write_text("\n".join([csv[0]] + [line.rsplit(",", 1)[0] + ","
                                                                     for line in csv[1:4]]) + "\n")

    def block(values):
        proto = build_protocol("dense_nn", "hbird", {"dataset": "voc", "aug_epochs": 2, "fractions": ["1/1"],
                                                    "memory_size": 102400, **values})
        return {"name": "dense_nn", "preset": "hbird", "dataset": "voc", "split": "val",
                "params": {**proto.settings(), "n_train": 10582, "n_val": 1449},
                "fingerprint": proto.fingerprint(), "request": proto.request_hash(), "data_root": "/data/voc",
                "data_stamp": "stamp-1"}

    runs = tmp_path / "runs"
    path = write_record(_record(model=_model("synth_dino", patch_size=8), protocol=block({"input_size": 448}),
                                variant={"fraction": "1/1"}), runs)
    a, b = resolve_sides(str(path), f"{table}:1", runs)
    diffs = {d.setting: d for d in explain(a, b)[0]}
    assert diffs["input_size"].effect == UNSTATED and diffs["input_size"].b == "(not stated)"
    assert "patch sizes 14, 16 only" in diffs["input_size"].why
    assert diffs["fingerprint"].effect == UNSTATED  # no stated setting differs
    assert not any(d.effect == YES and d.group == "protocol" for d in diffs.values())
    assert main(["explain", str(path), f"{table}:1", "--runs", str(runs)]) == 0
    assert "not stated by the paper cell" in capsys.readouterr().out
