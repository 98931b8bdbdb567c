"""The retrain check (harness.results.retrain_check): a `<name>_retrained` model beside `<name>` on
every cell either measured, judged by the tolerances of a spread file; the spread file is pinned
by sha256, has no optional field and its tolerances must follow from its cells by its rule; the
shipped spread file and the `--pretrain` suite that names it."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from harness.errors import ConfigError
from harness.results.records import make_record
from harness.results.retrain_check import (INSIDE, NO_SPREAD, OUTSIDE, CitedDifference, RetrainCheckSpec,
                                           RetrainSpread, SpreadCell, SpreadRun, SpreadTolerance, check_retrains,
                                           counted_runs, derive_tolerance, format_retrain_check, largest_measured,
                                           load_spread, retrain_pairs, round_up, source_line,
                                           spread_document)
from harness.io_utils import sha256_file

FP_DENSE, FP_KNN = "d5" * 8, "e6" * 8


def _run(name: str, role: str, kernel: str = "AVX2", seed: int = 0, recipe: str = "m") -> SpreadRun:
    return SpreadRun(name=name, recipe=recipe, role=role, command=f"ssl-bench pretrain x.yaml --out {{out}} # {name}",
                     kernel=kernel, train_seed=seed, cpu="test CPU", threads=2, torch="2.x", wall_s=1.0,
                     checkpoint_sha256="ab" * 32, code_commit="c" * 40)


def _spread(dense_values=(20.0, 20.3, 19.9), knn_values=(70.0, 71.0, 69.5), cited=True) -> RetrainSpread:
    names = ["m", "m_retrained_a", "m_retrained_b", "m_seed1"]  # m_seed1: another seed, not counted
    cells = [SpreadCell("m", "dense_nn", "voc", "val", "fraction=1/1", "mIoU", FP_DENSE,
                        dict(zip(names, (*dense_values, 9.0)))),
             SpreadCell("m", "knn", "bg", "val", "feature=cls,k=20", "top1", FP_KNN,
                        dict(zip(names, (*knn_values, 40.0))))]
    runs = [_run("m", "shipped"), _run("m_retrained_a", "retrained"), _run("m_retrained_b", "retrained", "DEFAULT"),
            _run("m_seed1", "other_seed", "AVX512", 1)]
    cites = [CitedDifference("issue 1", "knn", "bg", "feature=cls,k=20", "top1", 70.0, 72.2, "another CPU")] \
        if cited else []
    tolerances = []
    for protocol, metric, floor in (("dense_nn", "mIoU", 0.5), ("knn", "top1", 1.1)):
        big, where = largest_measured(cells, protocol, metric, counted_runs(runs))
        cite = [abs(c.retrained - c.shipped) for c in cites if (c.protocol, c.metric) == (protocol, metric)]
        tolerances.append(SpreadTolerance(protocol, metric, big, where, max([0.0, *cite]), floor,
                                          derive_tolerance([big], cite, floor, 0.1)))
    return RetrainSpread(measured_on=["m"], applies_to="every <name>_retrained model", rule="largest, rounded up",
                         round_up_to=0.1, floor_source="a table", date="2026-12-03", cpu="test CPU",
                         native_kernel="AVX512", torch="2.x", evaluated_with="native, 2 threads",
                         eval_command="ssl-bench run eval.yaml", made_by="a test",
                         runs=runs,
                         cells=cells, cited=cites, tolerances=tolerances)


def _write(tmp_path, doc: dict, name="spread.yaml") -> RetrainCheckSpec:
    path = tmp_path / name
    path.write_text("# a spread file\n" + yaml.safe_dump(doc, sort_keys=False))
    return RetrainCheckSpec(spread=str(path), sha256=sha256_file(path))


def _rec(model: str, protocol: str, variant: dict, seed, metrics: dict) -> dict:
    fp = FP_DENSE if protocol == "dense_nn" else FP_KNN
    m = {"name": model, "method": "dino", "arch": "vit_cpu_tiny", "weights_key": f"w-{model}"}
    p = {"name": protocol, "preset": "synth", "dataset": "voc" if protocol == "dense_nn" else "bg", "split": "val",
         "params": {}, "fingerprint": fp}
    return make_record(m, p, seed, variant, metrics, {"wall_s": 1.0})


def _records(model: str, dense: dict[str, float], knn: float, extra_metric: float | None = None) -> list[dict]:
    out = [_rec(model, "dense_nn", {"fraction": f}, s, {"mIoU": v + 0.1 * i})
           for f, v in dense.items() for i, s in enumerate((42, 400))]
    metrics = {"top1": knn} if extra_metric is None else {"top1": knn, "top5": extra_metric}
    return out + [_rec(model, "knn", {"feature": "cls", "k": 20}, None, metrics)]


# ----------------------------------------------------------------------------- the rule
def test_round_up_and_the_rule():
    assert round_up(0.41, 0.1) == pytest.approx(0.5)
    assert round_up(0.4, 0.1) == pytest.approx(0.4)  # on the grid: stays
    assert round_up(0.0, 0.1) == 0.0
    assert derive_tolerance([0.41], [], 0.5, 0.1) == pytest.approx(0.5)  # the floor
    assert derive_tolerance([1.23], [5.4], 0.5, 0.1) == pytest.approx(5.4)  # a cited difference counts
    assert derive_tolerance([2.01], [], 1.1, 0.1) == pytest.approx(2.1)
    spread = _spread()
    big, where = largest_measured(spread.cells, "knn", "top1", counted_runs(spread.runs))
    assert big == pytest.approx(1.5) and "m_retrained_a vs m_retrained_b" in where  # the other seed: not counted
    assert largest_measured(spread.cells, "knn", "top1")[0] == pytest.approx(31.0)  # every run


def test_pairs_by_suffix():
    pairs, alone = retrain_pairs(["a", "a_retrained", "b_retrained", "_retrained", "c"], "_retrained")
    assert pairs == [("a", "a_retrained")] and alone == ["b_retrained"]


# ----------------------------------------------------------------------------- the check
def test_cells_inside_outside_unjudged_missing_and_no_twin():
    spread = _spread()  # tolerances: dense_nn mIoU 0.5 (floor), knn top1 2.2 (cited)
    shipped = _records("x", {"1/1": 20.0, "1/8": 15.0}, 70.0, extra_metric=90.0)
    retrained = _records("x_retrained", {"1/1": 20.3}, 73.0, extra_metric=91.0)  # no 1/8 record
    lonely = _records("y_retrained", {"1/1": 20.0}, 70.0)
    rows = check_retrains(spread, shipped + retrained + lonely)
    by = {(r["protocol"], r["variant"], r["metric"]): r for _, r in rows.iterrows() if r["shipped_model"] == "x"}
    dense = by[("dense_nn", "fraction=1/1", "mIoU")]
    assert dense["verdict"] == INSIDE and dense["delta"] == pytest.approx(0.3) and dense["tolerance"] == 0.5
    knn = by[("knn", "feature=cls,k=20", "top1")]
    assert knn["verdict"] == OUTSIDE and knn["delta"] == pytest.approx(3.0) and knn["tolerance"] == pytest.approx(2.2)
    assert by[("knn", "feature=cls,k=20", "top5")]["verdict"] == NO_SPREAD
    missing = by[("dense_nn", "fraction=1/8", "mIoU")]
    assert missing["verdict"] == "only x" and "not compared" in missing["note"]
    twinless = rows[rows["retrained_model"] == "y_retrained"]
    assert list(twinless["verdict"]) == ["no shipped twin"]
    text = format_retrain_check(spread, rows, "zoo/spread.yaml")
    assert "the largest retrain-to-retrain spread of the recipes m " in text and "zoo/spread.yaml" in text
    assert "CPU kernels AVX2, DEFAULT" in text
    assert "OUTSIDE" in text and "not a failure of the run" in text and "y_retrained: no shipped twin" in text


def test_a_cell_on_the_tolerance_is_inside():
    spread = _spread()
    rows = check_retrains(spread, _records("x", {"1/1": 20.0}, 70.0) + _records("x_retrained", {"1/1": 20.5}, 67.8))
    assert set(rows["verdict"]) == {INSIDE}


def test_suite_checks_report_outside_cells_without_failing(tmp_path):
    from harness.running.suite import SuiteConfig, suite_checks

    spec = _write(tmp_path, spread_document(_spread()))
    records = _records("x", {"1/1": 20.0}, 70.0) + _records("x_retrained", {"1/1": 25.0}, 70.0)
    blocks, failed = suite_checks(SuiteConfig(retrain_check=spec), records)
    assert failed == [] and len(blocks) == 1 and "OUTSIDE" in blocks[0]


# ----------------------------------------------------------------------------- the file
def test_spread_file_round_trip(tmp_path):
    spread = _spread()
    assert load_spread(_write(tmp_path, spread_document(spread))) == spread


def test_a_changed_byte_is_an_error(tmp_path):
    spec = _write(tmp_path, spread_document(_spread()))
    path = tmp_path / "spread.yaml"
    path.write_text(path.read_text().replace("# a spread file", "# a spread filE"))
    with pytest.raises(ConfigError, match="sha256 .* changed since the suite pinned it"):
        load_spread(spec)


@pytest.mark.parametrize("field", ["cpu", "eval_command", "rule", "cited", "tolerances"])
def test_a_missing_field_is_an_error(tmp_path, field):
    doc = spread_document(_spread())
    del doc[field]
    with pytest.raises(ConfigError, match=field):
        load_spread(_write(tmp_path, doc))


def test_a_missing_run_field_is_an_error(tmp_path):
    doc = spread_document(_spread())
    del doc["runs"][1]["kernel"]
    with pytest.raises(ConfigError, match="kernel"):
        load_spread(_write(tmp_path, doc))


def test_tolerances_must_follow_from_the_cells(tmp_path):
    doc = spread_document(_spread())
    doc["tolerances"][0]["tolerance"] = 3.0  # a hand-widened tolerance
    with pytest.raises(ConfigError, match="dense_nn mIoU: states 3"):
        load_spread(_write(tmp_path, doc, "widened.yaml"))
    doc = spread_document(_spread())
    doc["cells"][1]["values"]["m_retrained_b"] = 60.0  # an edited measurement
    with pytest.raises(ConfigError, match="knn top1"):
        load_spread(_write(tmp_path, doc, "edited.yaml"))
    doc = spread_document(_spread())
    doc["runs"][3]["role"] = "retrained"  # the other seed counted: the tolerances no longer follow
    with pytest.raises(ConfigError, match="the cells and the rule give"):
        load_spread(_write(tmp_path, doc, "recounted.yaml"))
    doc = spread_document(_spread())
    doc["tolerances"] = doc["tolerances"][:1]
    with pytest.raises(ConfigError, match="none for knn top1"):
        load_spread(_write(tmp_path, doc, "short.yaml"))


def test_runs_need_one_shipped_and_a_retrained(tmp_path):
    spread = _spread()
    doc = spread_document(dataclasses.replace(spread, runs=[dataclasses.replace(r, role="retrained")
                                                            for r in spread.runs]))
    with pytest.raises(ConfigError, match="one 'shipped' run named m"):
        load_spread(_write(tmp_path, doc))


def _two_recipes() -> RetrainSpread:
    """Recipe m (spread 0.3 on dense NN) and recipe n (spread 1.2): n's runs sit 10 points below m's,
    which no pair counts (two recipes are two models)."""
    spread = _spread(cited=False)
    runs = [*spread.runs, _run("n", "shipped", recipe="n"), _run("n_retrained_a", "retrained", recipe="n")]
    cells = [*spread.cells, SpreadCell("n", "dense_nn", "voc", "val", "fraction=1/1", "mIoU", FP_DENSE,
                                       {"n": 10.0, "n_retrained_a": 11.2})]
    tolerances = []
    for t in spread.tolerances:
        big, where = largest_measured(cells, t.protocol, t.metric, counted_runs(runs))
        tolerances.append(dataclasses.replace(t, largest_measured=big, largest_between=where,
                                              tolerance=derive_tolerance([big], [], t.floor, 0.1)))
    return dataclasses.replace(spread, measured_on=["m", "n"], runs=runs, cells=cells, tolerances=tolerances)


def test_the_tolerance_is_the_largest_spread_of_any_recipe_never_across_two(tmp_path):
    spread = _two_recipes()
    dense = spread.tolerance_of("dense_nn", "mIoU")
    assert dense.largest_measured == pytest.approx(1.2) and dense.tolerance == pytest.approx(1.2)
    assert dense.largest_between.endswith("n vs n_retrained_a")
    assert spread.tolerance_of("knn", "top1").tolerance == pytest.approx(1.5)  # m's alone: n has no k-NN cell
    assert load_spread(_write(tmp_path, spread_document(spread))) == spread
    assert "the recipes m, n" in source_line(spread, "spread.yaml")


def test_a_cell_with_another_recipes_run_or_a_recipe_not_stated_is_an_error(tmp_path):
    doc = spread_document(_two_recipes())
    doc["cells"][2]["values"]["m"] = 10.5  # m's file in n's cell
    with pytest.raises(ConfigError, match="cell n dense_nn"):
        load_spread(_write(tmp_path, doc, "mixed.yaml"))
    doc = spread_document(_two_recipes())
    doc["measured_on"] = ["m"]
    with pytest.raises(ConfigError, match="the runs are of the recipes"):
        load_spread(_write(tmp_path, doc, "unstated.yaml"))
    doc = spread_document(_two_recipes())
    doc["runs"][4]["name"] = "n_shipped"
    with pytest.raises(ConfigError, match="one 'shipped' run named n"):
        load_spread(_write(tmp_path, doc, "renamed.yaml"))


# ----------------------------------------------------------------------------- the shipped file
def test_the_retrain_suite_names_the_shipped_spread_file_and_it_states_its_provenance():
    from harness.cli import RETRAIN_SUITE
    from harness.models.zoo import zoo_entry
    from harness.running.suite import load_suite

    suite, _ = load_suite(RETRAIN_SUITE)  # loads the spread file: sha256, schema, rule
    spec = suite.retrain_check
    assert spec is not None and spec.spread == "zoo/synthscenes_retrain_spread.yaml" and spec.suffix == "_retrained"
    spread = load_spread(spec)
    shipped = [r for r in spread.runs if r.role == "shipped"]
    assert [r.name for r in shipped] == spread.measured_on and len(spread.measured_on) >= 2
    assert max(sum(r.recipe == n and r.role == "retrained" for r in spread.runs) for n in spread.measured_on) >= 2
    assert len({r.checkpoint_sha256 for r in spread.runs}) == len(spread.runs)
    for recipe in spread.measured_on:
        entry = zoo_entry(recipe)
        assert next(r for r in shipped if r.name == recipe).checkpoint_sha256 == entry.sha256
        retrained = [r for r in spread.runs if r.recipe == recipe and r.role == "retrained"]  # other kernels
        assert retrained
        for r in retrained:  # the recorded command, run as stated
            assert entry.provenance["command"] in r.command and r.kernel and r.cpu
    assert spread.cpu and spread.torch and spread.native_kernel
    assert all(len(r.code_commit) == 40 for r in spread.runs)
    assert spread.date and spread.eval_command and spread.rule and spread.cited
    assert all(c.source and c.note for c in spread.cited)
    # every retrained model of the suite has a twin, and the spread covers every protocol the suite
    # runs on every machine (seg_linear needs mmseg and is reported as not judged)
    names = [m.name for m in suite.models]
    pairs, alone = retrain_pairs(names, spec.suffix)
    assert pairs and not alone
    judged = {t.protocol for t in spread.tolerances}
    assert {p.name for p in suite.protocols if not p.requires} <= judged


def test_the_generator_keeps_every_runs_mean_per_cell_and_derives_the_tolerances():
    from scripts.retrain_spread import measured_cells

    by_model = {"m": _records("m", {"1/1": 20.0}, 70.0),
                "m_retrained_a": _records("m_retrained_a", {"1/1": 20.2}, 72.0),
                "m_retrained_b": _records("m_retrained_b", {"1/1": 19.7}, 70.5, extra_metric=3.0)}
    cells = measured_cells(by_model, "m", ["m_retrained_a", "m_retrained_b"])
    dense = next(c for c in cells if c.protocol == "dense_nn")
    assert dense.values == pytest.approx({"m": 20.05, "m_retrained_a": 20.25, "m_retrained_b": 19.75})  # seed means
    knn = next(c for c in cells if c.protocol == "knn")
    assert knn.variant == "feature=cls,k=20" and knn.values == {"m": 70.0, "m_retrained_a": 72.0,
                                                                "m_retrained_b": 70.5}
    assert {c.metric for c in cells} == {"mIoU", "top1"}  # top5: the shipped file did not measure it
    big, where = largest_measured(cells, "knn", "top1")
    assert big == pytest.approx(2.0) and where.endswith("m vs m_retrained_a")
    with pytest.raises(ConfigError, match="no records of 'm_retrained_c'"):
        measured_cells(by_model, "m", ["m_retrained_c"])


def test_pretrain_with_a_changed_spread_file_is_one_error_line_before_any_work(tmp_path, monkeypatch, capsys):
    import harness.cli as cli

    spec = _write(tmp_path, spread_document(_spread()))
    (tmp_path / "spread.yaml").write_text((tmp_path / "spread.yaml").read_text() + "# edited\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"pretrain_data": "", "models": [], "protocols": [],
                                     "retrain_check": {"spread": spec.spread, "sha256": spec.sha256}}))
    monkeypatch.setattr(cli, "RETRAIN_SUITE", str(suite))
    assert cli.main(["--pretrain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and "changed since the suite pinned it" in err[0] and len(err) == 1
