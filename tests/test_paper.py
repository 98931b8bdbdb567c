"""Paper tables: the published numbers' schema and spot values, the FLOPs estimate, the
dry-run plan of the real tables, and reproduce() end to end with a fake protocol (the
zoo lookup, checkpoint loading, harness.running.evaluate, records and the comparison are real)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness.models.backbone import ARCHS
from harness.models.checkpoints import save_checkpoint
from harness.models.flops import arch_flops as vit_flops
from harness.results.leaderboard import build_leaderboard
from harness.models.handle import ModelHandle
from harness.running.reproduce import reproduce
from harness.paper.spec import (CSV_COLUMNS, PAPER_DIR, list_tables, load_table, paper_numbers, read_paper_csv,
                                 table_files, tolerance_for)
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, protocol_declarations, register_protocol
from harness.results.records import iter_records
from harness.models.zoo import load_zoo

# every protocol declared here (a published number of another protocol is a typo)
KNOWN_PROTOCOLS = set(protocol_declarations())


# ----------------------------------------------------------------------------- published numbers
def test_paper_csv_schema():
    zoo = load_zoo()
    files = sorted(PAPER_DIR.glob("*.csv"))
    assert {f.stem for f in files} == {"cribo_table1", "cribo_table2", "cribo_table3", "ibot_imagenet",
                                       "dino_imagenet", "synclr_imagenet", "dinov2_imagenet", "hbird_readme",
                                       "neco_readme", "synthscenes", "ibot_table16_davis", "ibot_table16",
                                       "dino_copydays", "dinov3_dense", "lost_corloc", "tokencut_corloc", "ibot_table5",
                                       "synclr_table6", "synclr_unseen", "dinov2_depth", "dinov3_spair", "ibot_table8",
                                       "dinov3_navi", "ibot_table12", "dino_nn_retrieval", "probe3d_nyu_spair",
                                       "probe3d_navi", "ibot_table6", "synclr_table7", "ibot_table2", "ibot_table3",
                                       "ibot_table4_finetune", "ibot_table7", "synclr_table8"}
    for f in files:
        df = read_paper_csv(f)
        assert list(df.columns) == CSV_COLUMNS
        assert set(df["protocol"]) <= KNOWN_PROTOCOLS, f
        assert df["value"].between(0, 100).all(), f
        assert set(df["zoo_name"]) - {""} <= set(zoo), f
        assert not df.duplicated(["table", "row", "protocol", "dataset", "variant", "metric"]).any(), f
        assert all(v == "" or "=" in v for v in df["variant"]), f
    # every spec loads and describes its CSV's protocols and datasets (by its file: finding a name's
    # file reads the installed packages' entry points each time)
    for name, path in table_files().items():
        assert load_table(path).name == name


def _value(df, **kw):
    sel = df
    for k, v in kw.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, (kw, len(sel))
    return float(sel["value"].iloc[0])


def test_paper_spot_values():
    t1 = paper_numbers("cribo-table1")
    assert len(t1) == 94 and t1["row"].nunique() == 12  # Hummingbird has no 1/8 numbers
    assert _value(t1, method="CrIBo", arch="ViT-B/16", dataset="voc", variant="fraction=1/1") == 74.9
    assert _value(t1, method="DINO", pretrain_data="COCO", dataset="ade20k", variant="fraction=1/128") == 6.1
    assert _value(t1, method="TimeT", dataset="voc", variant="fraction=1/8") == 56.0
    assert _value(t1, method="CrIBo", pretrain_data="IN1K", arch="ViT-S/16", dataset="ade20k",
                  variant="fraction=1/64") == 16.5
    assert t1[(t1["method"] == "Hummingbird") & (t1["variant"] == "fraction=1/8")].empty
    row = t1[(t1["method"] == "CrIBo") & (t1["pretrain_data"] == "COCO")]
    assert set(row["zoo_name"]) == {"cribo_vits16_coco"} and row["epochs"].iloc[0] == "300"
    t2 = paper_numbers("cribo-table2")
    assert len(t2) == 48
    assert _value(t2, method="CrIBo", arch="ViT-S/8", dataset="pascal_context") == 40.6
    assert _value(t2, method="DINO", arch="ViT-B/16", dataset="coco_stuff164k") == 31.9
    t3 = paper_numbers("cribo-table3")
    assert len(t3) == 44 and set(t3["protocol"]) == {"segmenter"}
    assert _value(t3, method="MAE", arch="ViT-B/16", dataset="ade20k") == 46.4
    assert _value(t3, method="CrIBo", pretrain_data="COCO", dataset="voc") == 74.2
    ib = paper_numbers("ibot-imagenet")
    assert _value(ib, zoo_name="ibot_vitl16", protocol="linear") == 81.0
    assert _value(ib, zoo_name="ibot_vitb16_pt22k", protocol="knn") == 71.1
    dn = paper_numbers("dino-imagenet")
    assert _value(dn, arch="ViT-B/8", protocol="knn") == 77.4 and _value(dn, arch="ViT-S/16", protocol="linear") == 77.0
    assert _value(paper_numbers("synclr-imagenet"), arch="ViT-L/14") == 83.0
    d2 = paper_numbers("dinov2-imagenet")
    assert _value(d2, zoo_name="dinov2_vitg14_reg", protocol="linear") == 87.1
    assert _value(d2, zoo_name="dinov2_vits14", protocol="knn") == 79.0
    hb = paper_numbers("hbird-readme")
    assert _value(hb, zoo_name="dinov2_vitl14", variant="fraction=1/1,memory_size=1024000") == 71.7
    assert len(hb) == 19 and _value(hb[hb["table"].str.contains("orig")], zoo_name="dino_vitb16") == 55.9
    assert _value(paper_numbers("neco-readme"), zoo_name="neco_dinov2r_vitb14") == 82.9
    # the CrIBo rows whose authors released weights point at them
    for method, data, zoo in (("MAE", "IN1K", "mae_vitb16"), ("CrOC", "COCO", "croc_vits16_coco"),
                              ("CrOC", "IN1K", "croc_vits16_in1k"), ("TimeT", "IN1K+YTVOS", "timet_vits16")):
        for t in (t1, t2, t3):
            assert set(t[(t["method"] == method) & (t["pretrain_data"] == data)]["zoo_name"]) == {zoo}
    davis = paper_numbers("ibot-table16-davis")
    assert len(davis) == 6 and _value(davis, zoo_name="ibot_vits16", metric="J_mean") == 60.4
    assert _value(davis, zoo_name="dino_vits16", metric="F_mean") == 63.4
    lost = paper_numbers("lost-corloc")
    assert _value(lost, zoo_name="dino_vits16", dataset="coco20k") == 50.7 and len(lost) == 6
    assert _value(paper_numbers("tokencut-corloc"), zoo_name="dino_vitb16", dataset="voc12") == 72.4
    # + SynthScenes (shipped zoo), DAVIS, iBOT Table 16 retrieval, DINO Copydays, DINOv3 NYU, LOST, TokenCut,
    # iBOT Table 5, SynCLR Table 6 and unseen concepts, DINOv2 NYU linear4, DINOv3 SPair, iBOT Table 8, DINOv3 NAVI,
    # iBOT Table 12, DINO Tables 3-5, Probe3D Tables 2-3 and 5-6 (NYU + SPair, NAVI), iBOT Table 6 (ADE20K
    # UperNet cells; COCO Cascade Mask R-CNN box / mask AP cells), SynCLR Table 7, and the fine-tuning
    # tables: iBOT Tables 2, 3, 4 (rows 7-10), 7 and SynCLR Table 8
    assert len(paper_numbers()) == (94 + 48 + 44 + 14 + 8 + 2 + 16 + 19 + 9 + 50 + 6 + 8 + 1 + 9 + 6 + 6 + 8 + 18 + 12
                                    + 4 + 6 + 26 + 6 + 12 + 34 + 120 + 120 + 6 + 12 + 2 + 11 + 4 + 8 + 48 + 2)
    table6 = paper_numbers("ibot-table6")
    assert _value(table6, zoo_name="ibot_vitb16", protocol="upernet") == 50.0
    assert _value(table6, zoo_name="ibot_vitb16", protocol="detection", metric="mask_AP") == 44.2
    assert _value(paper_numbers("synclr-table7"), zoo_name="synclr_vitb16") == 54.3
    ft2, ft4 = paper_numbers("ibot-table2"), paper_numbers("ibot-table4-finetune")
    assert _value(ft2, method="iBOT", arch="ViT-S/16") == 82.3 and _value(ft2, method="Rand.", arch="ViT-B/16") == 81.8
    assert _value(ft4, zoo_name="ibot_vits16_full", variant="recipe=ibot_semi_head,train_subset=imagenet_1pct") == 61.9
    assert _value(paper_numbers("ibot-table7"), zoo_name="ibot_vits16", dataset="inat2018") == 73.7
    assert _value(paper_numbers("synclr-table8"), arch="ViT-L/14") == 87.9


def test_vit_flops():
    # ViT-B/16 at 224: 17.6 GMACs; ViT-S/16: 4.6 GMACs (the usual published figures)
    assert vit_flops(ARCHS["vit_base_patch16_224"], 224, 224) / 2e9 == pytest.approx(17.6, rel=0.01)
    assert vit_flops(ARCHS["vit_small_patch16_224"], 224, 224) / 2e9 == pytest.approx(4.6, rel=0.01)


def test_dry_run_real_table(capsys, tmp_path):
    res = reproduce("cribo-table1", None, tmp_path / "zoo", dry_run=True)
    text = capsys.readouterr().out
    assert res.cells is None and len(res.jobs) == 18  # 9 zoo checkpoints x (VOC, ADE20K)
    for name in ("cribo_vits16_coco", "cribo_vits16_in1k", "cribo_vitb16_in1k", "dino_vits16", "dino_vitb16",
                 "mae_vitb16", "croc_vits16_coco", "croc_vits16_in1k", "timet_vits16"):
        assert name in text
    assert "72 cells have a zoo checkpoint" in text
    # only rows without released weights stay unreproducible: DINO and MAE trained on COCO by
    # the CrIBo authors, and Hummingbird (8 + 8 + 6 cells)
    assert "no public checkpoint in the zoo): 22 cells of rows" in text
    assert "1: DINO ViT-S/16 COCO 300; 2: MAE ViT-S/16 COCO 300; 11: Hummingbird ViT-B/16 IN1K 300" in text
    assert "dense_nn[cribo]" in text and "368x496" in text and "PFLOP" in text
    assert "https://rdr.kuleuven.be/api/access/datafile/159667" in text  # where to get what is missing
    assert "no public checkpoint" in text and "Hummingbird" in text
    job = next(j for j in res.jobs if j.zoo_name == "dino_vits16" and j.dataset == "voc")
    # ViT-S/16 on 368x496 (713 patches) over 10,582 + 1,449 images
    assert job.cost.images == 10582 + 1449
    assert job.cost.flops == pytest.approx(vit_flops(ARCHS["vit_small_patch16_224"], 368, 496) * 12031)
    # an official full checkpoint present but untrusted is flagged, not run
    (tmp_path / "zoo" / "cribo_vits16_coco").mkdir(parents=True)
    (tmp_path / "zoo" / "cribo_vits16_coco" / "vits16-coco.pth").write_bytes(b"x")
    res = reproduce("cribo-table1", None, tmp_path / "zoo", dry_run=True, models=["cribo_vits16_coco"], echo=None)
    assert {j.status for j in res.jobs} == {"needs --trust-checkpoint"}


def test_dry_run_settings_by_patch_and_variant(tmp_path):
    """open-hummingbird-eval's README table: 512 px at patch 16, 504 at patch 14, one run per
    memory size; the memory size is a setting of the run, not a variant of its records."""
    res = reproduce("hbird-readme", None, tmp_path / "zoo", dry_run=True, echo=None)
    assert len(res.jobs) == 6 * 3
    by = {(j.zoo_name, j.variant): j for j in res.jobs}
    j14 = by[("dinov2_vitb14", "memory_size=102400")]
    assert j14.values["input_size"] == 504 and j14.values["memory_size"] == 102400 and j14.cost.train_hw == (504, 504)
    j16 = by[("dino_vitb16", "memory_size=10240000")]
    assert j16.values["input_size"] == 512 and len(j16.cells) == 2  # the README's own and the paper's number
    assert "dense_nn[hbird] memory_size=1024000" in res.text
    # the records do not carry memory_size: the run's setting is dropped from what they must
    # match (cell_variant), the cell matches on its fraction only
    from harness.paper.verdict import cell_variant, compare_cells, measure_cell
    ps = res.table.spec.protocols["dense_nn"]
    cell = res.table.rows.loc[j14.cells[0]]
    assert cell_variant(cell, ps, j14.variant) == {"fraction": "1/1"}
    assert cell_variant(cell, ps) == {"fraction": "1/1", "memory_size": "102400"}
    rec = {"variant": {"fraction": "1/1"}, "metrics": {"mIoU": 70.0}}
    assert measure_cell(cell, [rec], ps, j14.variant)["measured"] == 70.0
    assert measure_cell(cell, [rec], ps)["status"] == "not measured"  # without the run's settings
    # dropping the setting keys never reopens best-group picking: records that vary in a key
    # neither the cell nor the table pins are still ambiguous
    two = [rec, {"variant": {"fraction": "1/1", "k": 50}, "metrics": {"mIoU": 75.0}}]
    m = measure_cell(cell, two, ps, j14.variant)
    assert m["status"] == "ambiguous" and "measured" not in m
    # through compare_cells: each run's records decide its own memory size's cells only
    jobs = [j for j in res.jobs if j.zoo_name == "dinov2_vitb14"]
    got = {"memory_size=102400": 70.0, "memory_size=1024000": 74.0, "memory_size=10240000": 78.5}
    for j in jobs:
        j.status, j.records = "done", [{"variant": {"fraction": "1/1"}, "metrics": {"mIoU": got[j.variant]}}]
    c = compare_cells(res.table, jobs)
    c = c[c["zoo_name"] == "dinov2_vitb14"].set_index("variant")
    assert c.at["fraction=1/1,memory_size=102400", "measured"] == 70.0  # paper 69.1
    assert c.at["fraction=1/1,memory_size=102400", "verdict"] == "ok (|delta| <= 1)"
    assert c.at["fraction=1/1,memory_size=1024000", "verdict"].startswith("ok")      # 74.0 vs 74.6
    assert c.at["fraction=1/1,memory_size=10240000", "verdict"].startswith("DIFFERS")  # 78.5 vs 76.9


def test_every_table_protocol_states_tolerance_reason_and_variant(tmp_path):
    """configs/paper/*.yaml: each protocol gives tolerance (>= 0), tolerance_reason and a
    `variant` dict (written out, even when empty); a spec without them does not load."""
    import yaml

    from harness.errors import ConfigError
    from harness.paper.spec import spec_path

    for name, path in table_files().items():
        raw = yaml.safe_load(path.read_text())
        for proto, ps in raw["protocols"].items():
            assert isinstance(ps.get("tolerance"), (int, float)) and ps["tolerance"] >= 0, (name, proto)
            assert isinstance(ps.get("tolerance_reason"), str) and len(ps["tolerance_reason"].split()) >= 10, (name,
                                                                                                               proto)
            assert isinstance(ps.get("variant"), dict), (name, proto)
    spec = spec_path("neco-readme")
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace("tolerance_reason:", "tolerance_reason_was:"))
    with pytest.raises(ConfigError, match="tolerance_reason"):
        load_table(bad)
    # a settings variant that is also a record variant key, or a cell no settings variant covers
    hb = spec_path("hbird-readme").read_text()
    clash = tmp_path / "clash.yaml"
    clash.write_text(hb.replace("    variant: {}", "    variant: {memory_size: 102400}"))
    with pytest.raises(ConfigError, match="run settings"):
        load_table(clash)
    gap = tmp_path / "gap.yaml"
    gap.write_text(hb.replace("      memory_size=10240000: {memory_size: 10240000}\n", ""))
    with pytest.raises(ConfigError, match="matches 0 of variants"):
        load_table(gap)
    # a per-metric tolerance must name a metric of the protocol's cells
    p3 = spec_path("probe3d-nyu-spair").read_text()
    typo = tmp_path / "typo.yaml"
    typo.write_text(p3.replace("metric_tolerances: {rmse: 0.02}", "metric_tolerances: {RMSE: 0.02}"))
    with pytest.raises(ConfigError, match="metric_tolerances: RMSE"):
        load_table(typo)
    # a CSV field with an unquoted comma: one line, not pandas' traceback
    broken = tmp_path / "broken.csv"
    rows = ["P,Table 1,1,DINO,ViT-B/16,IN1K,,davis,davis2017,,J_mean,1.0,",
            "P,Table 5 (NAVI, Block3),1,DINO,ViT-B/16,IN1K,,davis,davis2017,,J_mean,1.0,"]
    broken.write_text("\n".join([",".join(CSV_COLUMNS), *rows]) + "\n")
    with pytest.raises(ConfigError, match="not a readable paper CSV"):
        read_paper_csv(broken)
    nocsv = tmp_path / "nocsv.yaml"
    nocsv.write_text(spec.read_text().replace("csv: neco_readme.csv", "csv: no_such_table.csv"))
    with pytest.raises(ConfigError, match="no_such_table.csv are neither beside it"):
        load_table(nocsv)


def test_a_protocol_folder_paper_table_is_found_beside_configs_paper(tmp_path, monkeypatch):
    """<protocol folder>/paper/<table>.yaml is listed and loaded by name like configs/paper's; a
    name in both places is an error, not a silent choice."""
    import harness.registry
    from harness.errors import ConfigError
    from harness.paper.spec import spec_path

    folder = tmp_path / "family"
    (folder / "paper").mkdir(parents=True)
    own = folder / "paper" / "family-table.yaml"
    own.write_text(spec_path("neco-readme").read_text())
    monkeypatch.setattr(harness.registry, "protocol_folders", lambda: [folder])
    assert "family-table" in list_tables() and "synthscenes" in list_tables()  # and configs/paper's
    assert spec_path("family-table") == own
    assert load_table("family-table").name == "family-table"
    (folder / "paper" / "synthscenes.yaml").write_text(own.read_text())
    with pytest.raises(ConfigError, match="specified twice"):
        list_tables()


def test_new_tables_pin_what_their_records_vary_in():
    """dinov2-imagenet / hbird-readme / neco-readme with records shaped as their protocols
    write them: every cell gets one group (never the best of several)."""
    from harness.paper.verdict import measure_cell

    def records(variants, metric, values):
        return [{"variant": v, "metrics": {metric: x}} for v, x in zip(variants, values)]

    d2 = load_table("dinov2-imagenet")
    knn_cell = d2.rows[(d2.rows["protocol"] == "knn") & (d2.rows["zoo_name"] == "dinov2_vits14")].iloc[0]
    # knn writes one record per k (ks 10 / 20 / 100 / 200): the table pins k = 20, even when
    # another k is closer to the paper's 79.0
    knn = records([{"k": k, "feature": "cls"} for k in (10, 20, 100, 200)], "top1", [79.0, 78.1, 77.0, 76.0])
    m = measure_cell(knn_cell, knn, d2.spec.protocols["knn"])
    assert m["status"] == "measured" and m["measured"] == 78.1
    lin_cell = d2.rows[(d2.rows["protocol"] == "linear") & (d2.rows["zoo_name"] == "dinov2_vits14")].iloc[0]
    lin = records([{"recipe": "dino"}, {"recipe": "dino", "cached_features": True}], "top1", [80.5, 81.1])
    m = measure_cell(lin_cell, lin, d2.spec.protocols["linear"])
    assert m["status"] == "measured" and m["measured"] == 80.5  # never the cached-feature shortcut
    for name in ("hbird-readme", "neco-readme"):
        tab = load_table(name)
        ps = tab.spec.protocols["dense_nn"]
        cell = tab.rows.iloc[0]
        settings = next(iter(ps.variants), "")
        m = measure_cell(cell, records([{"fraction": "1/1"}], "mIoU", [60.0]), ps, settings)
        assert m["status"] == "measured" and m["measured"] == 60.0, name


def test_low_shot_and_dino_retrieval_tables_run_their_settings_and_read_their_records(tmp_path):
    """iBOT Table 12 runs each protocol once per SimCLRv2 list (the train_subset setting, its size
    in the cost) and pins k and lambda; DINO Tables 3-5 run Oxford at 224 single-scale and Paris at
    512 multi-scale (README), copy detection at the resolution of the patch size."""
    from harness.paper.verdict import measure_cell

    t12 = reproduce("ibot-table12", None, tmp_path / "zoo", dry_run=True, echo=None)
    assert len(t12.table.rows) == 12 and len(t12.jobs) == 12
    lr_1pct = "lambda=0.1,train_subset=imagenet_1pct"
    assert _value(t12.table.rows, method="iBOT", protocol="logreg", variant=lr_1pct) == 65.9
    by = {(j.zoo_name, j.protocol, j.variant): j for j in t12.jobs}
    one = by[("ibot_vits16", "knn", "train_subset=imagenet_1pct")]
    ten = by[("ibot_vits16", "knn", "train_subset=imagenet_10pct")]
    assert one.values["train_subset"] == "imagenet_1pct" and one.cost.images == 12811 + 50000
    assert ten.cost.images == 128116 + 50000
    lr_job = by[("ibot_vits16", "logreg", "train_subset=imagenet_1pct")]
    cell = t12.table.rows.loc[lr_job.cells[0]]
    ps = t12.table.spec.protocols["logreg"]
    sweep = [{"variant": {"lambda": lam, "feature": "cls"}, "metrics": {"top1": x}}
             for lam, x in ((0.01, 66.0), (0.1, 65.2), (1.0, 60.0))]
    m = measure_cell(cell, sweep, ps, lr_job.variant)
    assert m["status"] == "measured" and m["measured"] == 65.2  # the pinned lambda, not the best one

    dn = reproduce("dino-nn-retrieval", None, tmp_path / "zoo", dry_run=True, echo=None)
    rows = dn.table.rows
    assert len(rows) == 34 and (rows["zoo_name"] != "").sum() == 22
    assert _value(rows, zoo_name="dino_vits16_gldv2", dataset="rparis6k", metric="mAP_H") == 51.6
    jobs = {(j.zoo_name, j.protocol, j.dataset): j for j in dn.jobs}
    ox, pa = jobs[("dino_vits16", "image_retrieval", "roxford5k")], jobs[("dino_vits16", "image_retrieval", "rparis6k")]
    assert (ox.values["imsize"], ox.values["multiscale"]) == (224, False)
    assert (pa.values["imsize"], pa.values["multiscale"]) == (512, True)
    assert jobs[("dino_vitb16", "copy_detection", "copydays")].values["imsize"] == 224
    b8 = jobs[("dino_vitb8", "copy_detection", "copydays")]
    assert b8.values["imsize"] == 320
    rec = [{"variant": {"imsize": s}, "metrics": {"mAP_strong": x}} for s, x in ((224, 80.0), (320, 85.0))]
    m = measure_cell(rows.loc[b8.cells[0]], rec, dn.table.spec.protocols["copy_detection"], b8.variant)
    assert m["status"] == "measured" and m["measured"] == 85.0


def test_probe3d_tables_give_rmse_its_own_tolerance_and_read_their_readout_runs(tmp_path):
    """Probe3D's depth columns mix delta (%) and RMSE (m): the RMSE cells are judged by their own
    tolerance; DINO / DINOv2 rows run with the class token concatenated, MAE / iBOT without."""
    from harness.paper.verdict import compare_cells

    res = reproduce("probe3d-nyu-spair", None, tmp_path / "zoo", dry_run=True, echo=None)
    rows = res.table.rows
    assert len(rows) == 120 and set(rows["zoo_name"]) >= {"dinov2_vitb14", "ibot_vitl16_pt22k", "mae_vitb16"}
    assert _value(rows, zoo_name="dinov2_vitb14", protocol="depth_dpt", metric="rmse") == 0.3307
    assert _value(rows, zoo_name="ibot_vitb16", protocol="correspondence", metric="PCK") == 35.7
    by = {(j.zoo_name, j.protocol): j for j in res.jobs}
    depth = by[("dinov2_vitb14", "depth_dpt")]
    assert depth.variant == "readout=dense_cls" and depth.values["readout"] == "dense_cls"
    assert by[("mae_vitb16", "normals_dpt")].values["readout"] == "dense"
    ps = res.table.spec.protocols["depth_dpt"]
    assert tolerance_for(ps, "rmse") == 0.02 and tolerance_for(ps, "delta1") == 1.5
    paper = {m: _value(rows, zoo_name="dinov2_vitb14", protocol="depth_dpt", metric=m) for m in ("rmse", "delta1")}
    # 3 cm off on RMSE fails even though it is far below the delta tolerance; 1 point off on delta1 passes
    depth.status, depth.records = "done", [{"variant": {}, "metrics": {"rmse": paper["rmse"] + 0.03,
                                                                       "delta1": paper["delta1"] - 1.0}}]
    c = compare_cells(res.table, [depth]).loc[depth.cells].set_index("metric")
    assert c.at["rmse", "tolerance"] == 0.02 and c.at["rmse", "verdict"].startswith("DIFFERS")
    assert c.at["delta1", "tolerance"] == 1.5 and c.at["delta1", "verdict"].startswith("ok")
    assert "<= 0.02 for rmse" in res.text
    navi = reproduce("probe3d-navi", None, tmp_path / "zoo", dry_run=True, echo=None)
    assert len(navi.table.rows) == 120
    assert _value(navi.table.rows, zoo_name="dino_vitb16", metric="recall_2cm_90_120") == 20.3


# ----------------------------------------------------------------------------- fake protocol
@dataclass
class FakeConfig:
    dataset: str = "voc"
    val_split: str = "val"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    lr_offsets: dict = field(default_factory=dict)  # {lr: offset}: one result per lr, as a sweep reports


@register_protocol("fake_probe")
class FakeProbe(Protocol):
    """Reads the real dataset (so a missing one fails as it would), and reports a number
    that the test can predict from the checkpoint: 50 + sum(cls_token), +-0.4 per seed."""

    Config = FakeConfig

    def run(self, model, data_root):
        ds = DATASETS.get(self.cfg.dataset)(data_root, self.cfg.val_split)
        assert len(ds) > 0
        base = 50.0 + float(model.backbone.cls_token.detach().sum())
        out = []
        for frac in ("1/2", "1/1"):
            seeds = self.cfg.seeds if frac != "1/1" else [None]
            for s in seeds:
                v = base + (0.4 * (s - 1) if s is not None else 0.0)
                for lr, offset in (self.cfg.lr_offsets or {None: 0.0}).items():
                    variant = {"fraction": frac} if lr is None else {"fraction": frac, "lr": lr}
                    out.append(ProtocolResult({"mIoU": v + offset, "pixel_accuracy": 90.0}, self.cfg.dataset,
                                              self.cfg.val_split, seed=s, variant=variant))
        return out


@pytest.fixture(scope="module")
def synth_root(synth_tiny):
    return synth_tiny  # the session's SynthScenes tiny, seed 0 (read only here)


def _tiny_checkpoint(zoo_dir, name, cls_value):
    handle = ModelHandle.random_init("vit_cpu_tiny", seed=1)
    state = handle.backbone.backbone_state_dict()
    state["cls_token"] = torch.full_like(state["cls_token"], cls_value)
    save_checkpoint(zoo_dir / name, state, {"method": "random_init", "arch": "vit_cpu_tiny",
                                            "arch_kwargs": handle.backbone.arch_kwargs})
    return 50.0 + float(state["cls_token"].sum())


def _write_table(tmp_path, cells, fake_probe: str = ""):
    rows = []
    for i, (zoo, proto, ds, variant, value) in enumerate(cells):
        rows.append(dict(paper="Fake (2024)", table="Table 9", row=i + 1, method=f"M{i}", arch="ViT-T/8",
                         pretrain_data="synthetic", epochs=1, protocol=proto, dataset=ds, variant=variant,
                         metric="mIoU", value=round(value, 4), zoo_name=zoo))
    pd.DataFrame(rows, columns=CSV_COLUMNS).to_csv(tmp_path / "fake.csv", index=False)
    (tmp_path / "fake-table.yaml").write_text("""
title: Fake table
csv: fake.csv
protocols:
  fake_probe: {preset: null, tolerance: 1.0, tolerance_reason: "test: one point", input: native,
               passes: {train: 1, val: 1}FAKE_PROBE}
  absent_probe: {preset: null, tolerance: 1.0, tolerance_reason: "test: one point"}
datasets:
  synth_voc: {reader: voc, root: ".", train_split: trainaug, val_split: val, n_train: 24, n_val: 12,
              native_hw: [64, 64]}
  synth_ade: {reader: ade20k, root: "no_such_folder", val_split: validation}
""".replace("FAKE_PROBE", f", {fake_probe}" if fake_probe else ""))
    return tmp_path / "fake-table.yaml"


def test_reproduce_pipeline_with_fake_protocol(tmp_path, synth_root, capsys):
    zoo_dir = tmp_path / "zoo"
    a = _tiny_checkpoint(zoo_dir, "tiny_a", 0.0)
    b = _tiny_checkpoint(zoo_dir, "tiny_b", 0.02)  # 64 dims -> +1.28
    table = _write_table(tmp_path, [
        ("tiny_a", "fake_probe", "synth_voc", "fraction=1/2", a + 0.5),    # 3 seeds, std 0.4: inside tolerance 1.0
        ("tiny_a", "fake_probe", "synth_voc", "fraction=1/1", a + 0.9),    # one run: inside tolerance 1.0
        ("tiny_b", "fake_probe", "synth_voc", "fraction=1/2", b + 3.0),    # differs
        ("tiny_a", "fake_probe", "synth_voc", "fraction=1/64", 10.0),      # variant the run does not produce
        ("tiny_gone", "fake_probe", "synth_voc", "fraction=1/2", 10.0),    # checkpoint missing
        ("", "fake_probe", "synth_voc", "fraction=1/2", 10.0),             # no public checkpoint
        ("tiny_a", "fake_probe", "synth_ade", "fraction=1/2", 10.0),       # dataset missing
        ("tiny_a", "absent_probe", "synth_voc", "fraction=1/2", 10.0),     # protocol not registered
    ])
    runs = tmp_path / "runs"
    res = reproduce(table, synth_root, zoo_dir, runs_dir=runs, out_dir=tmp_path / "out")
    text = capsys.readouterr().out
    c = res.cells.set_index("row")
    assert c.at["1", "measured"] == pytest.approx(a) and c.at["1", "n"] == 3
    assert c.at["1", "std"] == pytest.approx(0.4) and c.at["1", "delta"] == pytest.approx(-0.5, abs=1e-3)
    assert c.at["1", "verdict"] == "ok (|delta| <= 1)" and c.at["1", "tolerance"] == 1.0
    assert c.at["2", "n"] == 1 and c.at["2", "verdict"] == "ok (|delta| <= 1)"
    assert c.at["3", "measured"] == pytest.approx(b) and c.at["3", "verdict"].startswith("DIFFERS")
    assert c.at["4", "verdict"] == "not measured" and "fraction=1/64" in c.at["4", "note"]
    assert c.at["5", "verdict"] == "missing checkpoint"
    assert c.at["6", "verdict"] == "no public checkpoint"
    assert c.at["7", "verdict"] == "missing dataset" and "ADE20K root" in c.at["7", "note"]
    assert c.at["8", "verdict"] == "protocol unavailable"
    assert list(c["outcome"]) == ["pass", "pass", "fail", "fail", "not run", "not run", "not run", "not run"]
    assert "measured vs paper" in text and "DIFFERS" in text and "a + " not in text
    assert "missing dataset" in text and "protocol unavailable" in text
    assert "fake_probe: pass iff |measured - paper| <= 1 mIoU points" in text and "test: one point" in text
    assert "-> exit status 1 (some cell failed)" in text and res.exit_code == 1
    # the records are real result records: a leaderboard reads them, a second run reuses them
    recs = list(iter_records(runs))
    assert len(recs) == 2 * 4 and {r["model"]["name"] for r in recs} == {"tiny_a", "tiny_b"}
    assert not build_leaderboard(recs).empty
    again = reproduce(table, synth_root, zoo_dir, runs_dir=runs, echo=None)
    assert again.cells.set_index("row").at["1", "note"].endswith("(stored records)")
    assert len(list(iter_records(runs))) == 8
    saved = pd.read_csv(res.csv)
    assert {"paper", "value", "measured", "delta", "verdict"} <= set(saved.columns)
    # dry run of the same table: the plan, nothing run
    dry = reproduce(table, synth_root, zoo_dir, dry_run=True, echo=None)
    assert dry.cells is None and "fake_probe" in dry.text and "imported" in dry.text


def test_reproduce_and_run_write_the_same_records_for_the_same_plan(tmp_path, synth_root, monkeypatch):
    """One runner: a table reproduced, and the same plan written by hand as a suite and run,
    give the same records (models, protocols, fingerprints, data, variants, seeds, numbers)."""
    import json

    from harness.running.suite import load_suite, run_suite

    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    zoo_dir = tmp_path / "zoo"
    a = _tiny_checkpoint(zoo_dir, "tiny_a", 0.0)
    b = _tiny_checkpoint(zoo_dir, "tiny_b", 0.02)
    table = _write_table(tmp_path, [("tiny_a", "fake_probe", "synth_voc", "fraction=1/2", a),
                                    ("tiny_b", "fake_probe", "synth_voc", "fraction=1/1", b)])
    reproduced = reproduce(table, synth_root, zoo_dir, runs_dir=tmp_path / "reproduced", echo=None)
    assert [j.status for j in reproduced.jobs] == ["done", "done"]
    (tmp_path / "suite.yaml").write_text(f"""
pretrain_data: ""
zoo_dir: {zoo_dir}
models:
  - {{name: tiny_a, zoo: tiny_a}}
  - {{name: tiny_b, zoo: tiny_b}}
protocols:
  - {{name: fake_probe, dataset: voc, data_root: {synth_root}}}
""")
    suite, source = load_suite(tmp_path / "suite.yaml")
    ran = run_suite(suite, source, progress=False, out_dir=tmp_path / "results", log=lambda _: None)

    def key(r):
        proto = {k: v for k, v in r["protocol"].items()}
        return json.dumps([r["model"], proto, r["variant"], r["seed"], r["metrics"]], sort_keys=True, default=str)

    from_table = sorted(key(r) for r in iter_records(tmp_path / "reproduced"))
    assert len(from_table) == 8 and from_table == sorted(key(r) for r in ran["records"])


def test_a_protocol_entry_naming_a_model_the_suite_lacks_is_refused(tmp_path):
    from harness.errors import ConfigError
    from harness.running.suite import ModelEntry, ProtocolEntry, suite_pairs

    models = [ModelEntry(name="a", chance={}), ModelEntry(name="b", chance={})]
    only_b = ProtocolEntry(name="knn", dataset="imagenet", models=["b"])
    every = ProtocolEntry(name="knn", dataset="imagenet")
    assert [(p is only_b, m.name) for p, m in suite_pairs([only_b, every], models)] == \
        [(True, "b"), (False, "a"), (False, "b")]
    with pytest.raises(ConfigError, match="'c'"):
        suite_pairs([ProtocolEntry(name="knn", dataset="imagenet", models=["c"])], models)


def test_reproduce_cli(tmp_path, capsys):
    from harness.running import reproduce as paper_reproduce

    parser = argparse.ArgumentParser()
    paper_reproduce.add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["reproduce", "cribo-table1", "--dry-run", "--zoo-dir", str(tmp_path)])
    assert args.func(args) == 0
    assert "CrIBo Table 1" in capsys.readouterr().out
    args = parser.parse_args(["paper", "synclr-imagenet"])
    assert args.func(args) == 0
    assert "83.0" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the verdict rule
def _table_in_code(cells, tolerance=1.0, variant=None):
    """A one-protocol Table built in code: ``cells`` = [(variant, paper value, zoo name)]."""
    from harness.paper.spec import DatasetSpec, ProtocolSpec, Table, TableSpec

    rows = pd.DataFrame([dict(paper="Fake", table="T", row=str(i + 1), method="M", arch="A", pretrain_data="D",
                              epochs="1", protocol="p", dataset="d", variant=v, metric="mIoU", value=val,
                              zoo_name=zoo) for i, (v, val, zoo) in enumerate(cells)], columns=CSV_COLUMNS)
    ps = ProtocolSpec(tolerance=tolerance)
    ps.tolerance_reason = "test"
    if variant is not None:
        ps.variant = variant
    return Table("fake", TableSpec("Fake", "fake.csv", {"p": ps}, {"d": DatasetSpec(reader="voc")}), Path("x"), rows)


def _job(tab, zoo, records, status="done"):
    from harness.paper.plan import Cost, Job

    cells = [i for i in tab.rows.index if tab.rows.at[i, "zoo_name"] == zoo]
    return Job(zoo, "p", "d", cells, None, None, None, None, "found", "ok", Cost(None, None, None, None, None),
               status=status, records=records)


def _records(variant, values):
    return [{"variant": dict(variant), "metrics": {"mIoU": v}, "seed": s} for s, v in enumerate(values)]


def test_a_wide_seed_spread_never_loosens_the_tolerance():
    from harness.paper.verdict import compare_cells, verdict

    tab = _table_in_code([("fraction=1/2", 50.0, "z"), ("fraction=1/8", 50.0, "z")], tolerance=0.3)
    recs = (_records({"fraction": "1/2"}, [50.1, 50.5, 50.9])     # delta +0.5 > 0.3, inside 2 std (0.8)
            + _records({"fraction": "1/8"}, [48.2, 50.2, 52.2]))  # delta +0.2 <= 0.3, but std 2.0 > 0.3
    c = compare_cells(tab, [_job(tab, "z", recs)]).set_index("variant")
    assert c.at["fraction=1/2", "std"] == pytest.approx(0.4)
    assert c.at["fraction=1/2", "verdict"].startswith("DIFFERS"), c.at["fraction=1/2", "verdict"]
    assert c.at["fraction=1/8", "verdict"].startswith("inconclusive"), c.at["fraction=1/8", "verdict"]
    assert (c["outcome"] == "fail").all()
    assert verdict(0.5, 0.4, 3, 0.3).startswith("DIFFERS") and verdict(0.2, 0.1, 3, 0.3).startswith("ok")
    assert verdict(0.3, 0.0, 1, 0.3).startswith("ok")  # the bound is inclusive


def test_variant_groups_the_cell_does_not_pin_are_ambiguous_never_the_best():
    from harness.paper.verdict import compare_cells

    recs = _records({"fraction": "1/1", "lr": 0.1}, [50.0]) + _records({"fraction": "1/1", "lr": 0.01}, [55.0])
    tab = _table_in_code([("fraction=1/1", 55.0, "z")])  # the better group would match the paper exactly
    c = compare_cells(tab, [_job(tab, "z", recs)]).iloc[0]
    assert c["verdict"] == "ambiguous" and c["outcome"] == "fail" and c["n"] == 0 and pd.isna(c["measured"])
    assert "lr=0.1 (n=1)" in c["note"] and "lr=0.01 (n=1)" in c["note"]
    # the table's protocol variant pins the key: only that group counts, better or not
    tab = _table_in_code([("fraction=1/1", 55.0, "z")], variant={"lr": 0.1})
    c = compare_cells(tab, [_job(tab, "z", recs)]).iloc[0]
    assert c["measured"] == 50.0 and c["verdict"].startswith("DIFFERS")
    tab = _table_in_code([("fraction=1/1", 55.0, "z")], variant={"lr": "1e-2"})  # compared as numbers
    c = compare_cells(tab, [_job(tab, "z", recs)]).iloc[0]
    assert c["measured"] == 55.0 and c["verdict"].startswith("ok")
    # a cell's own key overrides the table's default; null = records must not carry the key
    tab = _table_in_code([("fraction=1/1,lr=0.01", 55.0, "z")], variant={"lr": 0.1})
    assert compare_cells(tab, [_job(tab, "z", recs)]).iloc[0]["measured"] == 55.0
    cached = _records({"recipe": "dino", "cached_features": True}, [77.0])
    tab = _table_in_code([("recipe=dino", 77.0, "z")], variant={"cached_features": None})
    c = compare_cells(tab, [_job(tab, "z", cached)]).iloc[0]
    assert c["verdict"] == "not measured" and "cached_features=True" in c["note"] and c["outcome"] == "fail"


@pytest.mark.parametrize("case, expected", [("nothing measured", 1), ("a cell differs", 1),
                                            ("every measured cell passes", 0)])
def test_reproduce_exit_status(monkeypatch, case, expected):
    from harness.running import reproduce as paper_reproduce
    from harness.paper.verdict import compare_cells

    tab = _table_in_code([("fraction=1/1", 50.0, "z"), ("fraction=1/2", 50.0, "z"), ("fraction=1/1", 50.0, "gone")])
    gone = _job(tab, "gone", [], status="missing checkpoint")  # not run: fails nothing by itself
    if case == "nothing measured":
        jobs = [_job(tab, "z", [], status="missing dataset"), gone]
    else:
        recs = _records({"fraction": "1/1"}, [50.2]) + _records({"fraction": "1/2"}, [50.1, 49.9])
        if case == "a cell differs":
            recs = _records({"fraction": "1/1"}, [52.0]) + recs[1:]
        jobs = [_job(tab, "z", recs), gone]
    res = paper_reproduce.ReproduceResult(tab, jobs, compare_cells(tab, jobs), "")
    monkeypatch.setattr(paper_reproduce, "reproduce", lambda *a, **k: res)
    parser = argparse.ArgumentParser()
    paper_reproduce.add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["reproduce", "fake"])
    assert args.func(args) == expected, res.cells[["zoo_name", "variant", "verdict"]]


def test_reproduce_cli_exit_status_end_to_end(tmp_path, synth_root, capsys):
    """The real pipeline and CLI: pass -> 0, nothing measured -> 1, an ambiguous cell -> 1, a
    table variant that pins the sweep -> that group's number decides."""
    from harness.running import reproduce as paper_reproduce

    zoo_dir = tmp_path / "zoo"
    a = _tiny_checkpoint(zoo_dir, "tiny_a", 0.0)
    parser = argparse.ArgumentParser()
    paper_reproduce.add_cli(parser.add_subparsers(dest="command"))

    def cli(cells, fake_probe=""):
        table = _write_table(tmp_path, cells, fake_probe)
        args = parser.parse_args(["reproduce", str(table), "--data-root", str(synth_root), "--zoo-dir", str(zoo_dir),
                                  "--runs", str(tmp_path / "runs")])
        code = args.func(args)
        return code, capsys.readouterr().out

    code, out = cli([("tiny_a", "fake_probe", "synth_voc", "fraction=1/2", a + 0.5),
                     ("tiny_gone", "fake_probe", "synth_voc", "fraction=1/2", 10.0)])
    assert code == 0 and "exit status 0" in out
    code, out = cli([("tiny_gone", "fake_probe", "synth_voc", "fraction=1/2", 10.0)])
    assert code == 1 and "nothing was measured" in out
    sweep = "values: {lr_offsets: {'0.1': 0.0, '0.01': 5.0}}"
    code, out = cli([("tiny_a", "fake_probe", "synth_voc", "fraction=1/1", a + 5.0)], sweep)
    assert code == 1 and "ambiguous" in out
    code, out = cli([("tiny_a", "fake_probe", "synth_voc", "fraction=1/1", a + 5.0)], sweep + ", variant: {lr: 0.1}")
    assert code == 1 and "DIFFERS" in out and "variant lr=0.1" in out
    code, out = cli([("tiny_a", "fake_probe", "synth_voc", "fraction=1/1", a + 5.0)], sweep + ", variant: {lr: 0.01}")
    assert code == 0, out
    args = parser.parse_args(["reproduce", str(tmp_path / "fake-table.yaml"), "--dry-run", "--zoo-dir", str(zoo_dir)])
    assert args.func(args) == 0


# ----------------------------------------------------------------------------- real protocols
def test_reproduce_small_table_with_real_protocols(tmp_path, synth_root, monkeypatch):
    """knn and dense_nn (the real modules) on SynthScenes with random-init zoo entries."""
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))  # feature cache
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))  # protocol artifacts
    zoo_dir = tmp_path / "zoo"
    for name, seed in (("rand_a", 0), ("rand_b", 1)):
        h = ModelHandle.random_init("vit_cpu_tiny", seed=seed)
        save_checkpoint(zoo_dir / name, h.backbone.backbone_state_dict(),
                        {"method": "random_init", "arch": "vit_cpu_tiny", "arch_kwargs": h.backbone.arch_kwargs})
    rows = []
    for zoo in ("rand_a", "rand_b"):
        for frac in ("1/2", "1/1"):
            rows.append(("dense_nn", "voc", f"fraction={frac}", "mIoU", 20.0, zoo))
        rows.append(("knn", "imagenet", "k=20", "top1", 10.0, zoo))
    pd.DataFrame([dict(paper="Small (2024)", table="Table 1", row=i // 3 + 1, method="random", arch="ViT-T/8",
                       pretrain_data="-", epochs=0, protocol=p, dataset=d, variant=v, metric=m, value=val,
                       zoo_name=z) for i, (p, d, v, m, val, z) in enumerate(rows)],
                 columns=CSV_COLUMNS).to_csv(tmp_path / "small.csv", index=False)
    (tmp_path / "small.yaml").write_text("""
title: Small table on SynthScenes
csv: small.csv
protocols:
  dense_nn:
    preset: cribo
    values: {fractions: ["1/2", "1/1"], seeds: [42, 400], progress: false, write_subsets: false}
    tolerance: 100
    tolerance_reason: "the point of this test is the plumbing"
  knn:
    preset: synth
    values: {ks: [10, 20], progress: false, cache: false}
    tolerance: 100
    tolerance_reason: "the point of this test is the plumbing"
    variant: {feature: cls}
    input: 64
datasets:
  voc: {reader: voc, root: ".", train_split: trainaug, val_split: val, n_train: 24, n_val: 12, native_hw: [64, 64]}
  imagenet: {reader: imagenet, root: imagenet, train_split: train, val_split: val, n_train: 24, n_val: 12}
""")
    res = reproduce(tmp_path / "small.yaml", synth_root, zoo_dir, runs_dir=tmp_path / "runs", echo=None)
    assert all(j.status == "done" for j in res.jobs), [(j.zoo_name, j.status, j.message) for j in res.jobs]
    c = res.cells
    assert c["n"].min() >= 1 and not c["measured"].isna().any()
    half = c[(c["variant"] == "fraction=1/2")]
    assert (half["n"] == 2).all()  # two subset seeds
    assert c["verdict"].str.startswith("ok").all()  # tolerance 100: the point is the plumbing
    lb = build_leaderboard(list(iter_records(tmp_path / "runs")))
    col = [k for k in lb.keys if k[0] == "knn" and k[3] == "feature=cls,k=20" and k[4] == "top1"]
    knn_a = c[(c["zoo_name"] == "rand_a") & (c["protocol"] == "knn")]["measured"].iloc[0]
    assert lb.cell("rand_a", col[0])[0] == pytest.approx(knn_a)
