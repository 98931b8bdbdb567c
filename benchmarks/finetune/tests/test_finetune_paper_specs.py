"""The fine-tuning paper tables (iBOT Tables 2, 3, 4 rows 7-10, 7; SynCLR Table 8): their dry-run plans
cost every cell with a zoo checkpoint from epochs x images x the model's FLOPs, the settings each
table's variants restate equal the presets they are named after, and a pass count naming a setting
that a run does not give is refused."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.config import from_dict
from harness.errors import ConfigError
from harness.models.backbone import ARCHS
from harness.models.flops import arch_flops
from harness.paper.spec import PAPER_DIR, load_table, spec_path
from harness.presets import load_presets
from harness.running.reproduce import reproduce
from harness.variants import parse_variant

IMAGENET = 1281167 + 50000
TABLES = {  # table -> runs planned (cells with a zoo checkpoint, one run per settings variant)
    "ibot-table2": 5, "ibot-table3": 4, "ibot-table4-finetune": 8, "ibot-table7": 24, "synclr-table8": 1,
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_dry_run_costs_every_finetune_cell(table, tmp_path):
    res = reproduce(table, None, tmp_path / "zoo", dry_run=True, echo=None)
    assert len(res.jobs) == TABLES[table]
    for job in res.jobs:
        epochs = job.values["epochs"]
        ds = res.table.spec.datasets[job.dataset]
        assert job.cost.flops_by_workload["train"] > 0 and job.gpu_hours > 0, job.zoo_name
        n_train = {"imagenet_1pct": 12811, "imagenet_10pct": 128116}.get(job.values.get("train_subset"), ds.n_train)
        assert job.cost.images == pytest.approx(epochs * (n_train + ds.n_val))
    assert "total estimated GPU-hours:" in res.text


def test_finetune_cost_is_epochs_times_images_times_flops(tmp_path):
    res = reproduce("ibot-table2", None, tmp_path / "zoo", dry_run=True, echo=None)
    vits = next(j for j in res.jobs if j.zoo_name == "ibot_vits16")
    f = arch_flops(ARCHS["vit_small_patch16_224"], 224, 224)
    # 200 epochs: training crops forward + backward (x 3), then the validation set each epoch
    assert vits.cost.flops == pytest.approx(200 * (3 * f * 1281167 + f * 50000))
    vitl = next(j for j in res.jobs if j.zoo_name == "ibot_vitl16")
    assert vitl.values["epochs"] == 50 and vitl.cost.images == pytest.approx(50 * IMAGENET)
    big = reproduce("ibot-table3", None, tmp_path / "zoo", dry_run=True, echo=None)
    assert {j.cost.train_hw for j in big.jobs} == {(224, 224), (384, 384), (512, 512)}


def _finetune_config():
    from benchmarks.finetune.config import FinetuneConfig

    return FinetuneConfig


@pytest.mark.parametrize("table", ["ibot-table2", "ibot-table3", "ibot-table4-finetune", "ibot-table7"])
def test_table_variants_equal_their_presets(table):
    """A variant `recipe=X` restates preset X's settings on top of the table's preset: they must agree."""
    config = _finetune_config()
    import benchmarks.finetune

    presets = load_presets("finetune", Path(benchmarks.finetune.__file__).parent / "presets")
    ps = load_table(table).spec.protocols["finetune"]
    fields = {f.name for f in dataclasses.fields(config)}
    for key, values in ps.variants.items():
        named = parse_variant(key)
        run = {k: v for k, v in {**presets[ps.preset], **ps.values, **values}.items() if k in fields}
        want = {k: v for k, v in presets[named["recipe"]].items() if k in fields}
        # the variant's other keys (input_size, train_subset) are settings of that run on top of the preset
        want.update({k: run[k] for k in named if k != "recipe" and k in fields})
        assert from_dict(config, run, key) == from_dict(config, want, named["recipe"]), (table, key)


def test_named_pass_count_needs_the_setting_in_every_run(tmp_path):
    text = spec_path("ibot-table2").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("recipe=ibot_vitb16: {epochs: 100}", "recipe=ibot_vitb16: {}")
                   .replace("csv: ibot_table2.csv", f"csv: {PAPER_DIR / 'ibot_table2.csv'}"))
    with pytest.raises(ConfigError, match="passes counts 'epochs'"):
        load_table(bad)


def test_every_recipe_preset_is_a_finetune_config():
    import benchmarks.finetune

    config = _finetune_config()
    presets = load_presets("finetune", Path(benchmarks.finetune.__file__).parent / "presets")
    recipes = {name: values for name, values in presets.items() if name.startswith(("ibot_", "synclr_"))}
    assert len(recipes) == 14 + 12  # and Table 2's lr sweep: 4 lrs x 3 archs
    sweep = {name: from_dict(config, values, name).lr for name, values in recipes.items() if "_lr" in name}
    assert sorted(set(sweep.values())) == [8e-4, 9e-4, 1e-3, 2e-3]
    for name, values in recipes.items():
        cfg = from_dict(config, values, name)
        assert cfg.epochs >= 50 and cfg.peak_lr() > 0, name
    assert from_dict(config, recipes["synclr_vitb16"], "synclr").peak_lr() == pytest.approx(5e-5 * 1024 / 256)


def test_table7_finds_each_data_set_in_its_official_layout(tmp_path):
    """The spec's roots, readers and splits agree with the readers: every data set of Table 7 is found
    under one data root holding them in iBOT's layout (run.sh's data/cifar, data/inat/2018, ...)."""
    from official_split_fixtures import write_cars, write_cifar10, write_cifar100, write_flowers, write_inat

    data = tmp_path / "data"
    write_cifar10(data / "cifar")
    write_cifar100(data / "cifar")
    write_inat(data / "inat" / "2018", 2018)
    write_inat(data / "inat" / "2019", 2019)
    write_flowers(data / "flwrs")
    write_cars(data / "cars")
    res = reproduce("ibot-table7", data, tmp_path / "zoo", dry_run=True, echo=None)
    assert {j.dataset: j.data_status for j in res.jobs} == {d: "found" for d in res.table.spec.datasets}
    (data / "flwrs" / "setid.mat").unlink()
    res = reproduce("ibot-table7", data, tmp_path / "zoo", dry_run=True, echo=None)
    flowers = next(j for j in res.jobs if j.dataset == "flowers")
    assert flowers.data_status.startswith("missing") and "setid.mat not found" in flowers.data_status


# iBOT Table 7 (arXiv 2111.07832, ar5iv rendering): (method, arch) -> (zoo checkpoint or None, the
# published top-1 of CIFAR-10, CIFAR-100, iNat18, iNat19, Flowers, Cars)
TABLE7_DATASETS = ["cifar10", "cifar100", "inat2018", "inat2019", "flowers", "cars"]
TABLE7 = {
    ("Rand.", "ViT-S/16"): (None, [99.0, 89.5, 70.7, 76.6, 98.2, 92.1]),
    ("BEiT", "ViT-S/16"): (None, [98.6, 87.4, 68.5, 76.5, 96.4, 92.1]),
    ("DINO", "ViT-S/16"): ("dino_vits16", [99.0, 90.5, 72.0, 78.2, 98.5, 93.0]),
    ("iBOT", "ViT-S/16"): ("ibot_vits16", [99.1, 90.7, 73.7, 78.5, 98.6, 94.0]),
    ("Rand.", "ViT-B/16"): (None, [99.0, 90.8, 73.2, 77.7, 98.4, 92.1]),
    ("BEiT", "ViT-B/16"): (None, [99.0, 90.1, 72.3, 79.2, 98.0, 94.2]),
    ("DINO", "ViT-B/16"): ("dino_vitb16", [99.1, 91.7, 72.6, 78.6, 98.8, 93.0]),
    ("iBOT", "ViT-B/16"): ("ibot_vitb16", [99.2, 92.2, 74.6, 79.6, 98.9, 94.3]),
}


def test_table7_rows_their_numbers_and_checkpoints():
    """Every cell of Table 7 is published once with its number; rows with a public checkpoint name a zoo
    entry of that arch, the others (Rand., BEiT) none; ViT-S/16 runs iNat on the README's ViT-S lrs."""
    from harness.models.zoo import ZOO_FILE, load_zoo

    zoo = load_zoo(ZOO_FILE)  # configs/zoo.yaml: the published checkpoints
    rows = load_table("ibot-table7").rows
    assert len(rows) == len(TABLE7) * len(TABLE7_DATASETS)
    for (method, arch), (zoo_name, values) in TABLE7.items():
        got = rows[(rows["method"] == method) & (rows["arch"] == arch)].set_index("dataset")
        assert sorted(got.index) == sorted(TABLE7_DATASETS), (method, arch)
        for dataset, value in zip(TABLE7_DATASETS, values):
            assert got.loc[dataset, "value"] == pytest.approx(value), (method, arch, dataset)
        assert set(got["zoo_name"]) == {zoo_name or ""}, (method, arch)
        if zoo_name:
            assert zoo[zoo_name].arch == {"ViT-S/16": "vit_small_patch16_224", "ViT-B/16": "vit_base_patch16_224"}[arch]
        inat = {got.loc[d, "variant"] for d in ("inat2018", "inat2019")}
        suffix = "_vits16" if arch == "ViT-S/16" else ""
        assert inat == {f"recipe=ibot_transfer_inat18{suffix}", f"recipe=ibot_transfer_inat19{suffix}"}


def test_recipe_presets_build_and_no_two_are_the_same_settings():
    from harness.registry import PROTOCOLS

    cls = PROTOCOLS.get("finetune")
    recipes = [name for name in cls.PRESETS if name.startswith(("ibot_", "synclr_"))]
    fingerprints = {cls.from_preset(name).fingerprint() for name in recipes}
    assert len(fingerprints) == len(recipes)
