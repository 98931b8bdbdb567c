"""A rerun whose records all exist builds no model; a remembered identity is checked when the
model is built, and anything the model depends on makes another memo."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from harness.models import sources
from harness.models.checkpoints import save_checkpoint
from harness.models.handle import ModelHandle
from harness.protocol import Protocol, ProtocolResult
from harness.registry import register_protocol
from harness.running import model_memo
from harness.running.suite import execute_suite, load_suite


@dataclass
class ProbeConfig:
    dataset: str = "toy"
    k: int = 3


@register_protocol("memo_probe")
class MemoProbe(Protocol):
    """A number from the weights, and settings that need the built backbone (as the mmseg
    protocols' head spec does)."""

    Config = ProbeConfig
    measured: list[str] = []

    def model_settings(self, model) -> dict:
        return {"width": int(model.backbone.embed_dim)}

    def run(self, model, data_root):
        MemoProbe.measured.append(model.name)
        w = float(sum(p.detach().double().sum() for p in model.backbone.parameters()))
        return [ProtocolResult({"w": w}, "toy", "val", seed=0, variant={"k": self.cfg.k})]


@pytest.fixture
def suite_file(isolated_home, synth_tiny, tmp_path):
    ckpt = tmp_path / "ckpt" / "vit"
    _save(ckpt, seed=3)
    path = tmp_path / "suite.yaml"
    path.write_text(f"""
synth: {{preset: tiny, root: {synth_tiny}}}
device: cpu
models:
  - name: rand
    random_init: {{arch: vit_cpu_tiny, seed: 0}}
  - name: ckpt
    checkpoint: {ckpt}.safetensors
  - name: pix
    pixels: {{patch_size: 8}}
protocols:
  - name: memo_probe
    dataset: toy
    data_root: "{{synth}}"
    models: [rand, ckpt]
    set: {{k: 3}}
""")
    MemoProbe.measured = []
    return path


def _save(stem, seed: int) -> None:
    model = ModelHandle.random_init("vit_cpu_tiny", seed=seed)
    save_checkpoint(stem, model.backbone.state_dict(), {"method": "dino", "arch": "vit_cpu_tiny",
                                                        "arch_kwargs": dict(model.backbone.arch_kwargs)})


def _run(path, set_k: int = 3):
    if set_k != 3:
        path.write_text(path.read_text().replace("set: {k: 3}", f"set: {{k: {set_k}}}"))
    suite, source = load_suite(path)
    return execute_suite(suite, source, progress=False, log=lambda *_: None)


@pytest.fixture
def builds(monkeypatch):
    """The names of the models built, in order."""
    built: list[str] = []
    real = sources.build_model

    def counting(spec, ctx=None, name=None):
        model = real(spec, ctx, name)
        built.append(model.name)
        return model

    monkeypatch.setattr("harness.running.suite.build_model", counting)
    return built


def _key(rec: dict) -> tuple:
    return rec["model"]["name"], rec["model"]["weights_key"], rec["protocol"]["fingerprint"], rec["metrics"]["w"]


def test_a_rerun_with_every_record_builds_no_model(suite_file, isolated_home, builds):
    first = _run(suite_file)
    assert sorted(builds) == ["ckpt", "pix", "rand"] and sorted(MemoProbe.measured) == ["ckpt", "rand"]
    memos = sorted((isolated_home / "home" / "model_memo").glob("*.json"))
    assert len(memos) == 2  # the pixel row's source states no inputs: never remembered
    builds.clear()
    second = _run(suite_file)
    assert builds == ["pix"] and sorted(MemoProbe.measured) == ["ckpt", "rand"]
    assert sorted(map(_key, second.records)) == sorted(map(_key, first.records))
    assert all(p.outcome.skipped for p in second.pairs)


def test_a_remembered_model_is_built_when_a_protocol_measures_it(suite_file, builds):
    _run(suite_file)
    builds.clear()
    again = _run(suite_file, set_k=5)  # another request: measured, so built
    assert sorted(builds) == ["ckpt", "pix", "rand"]
    assert sorted(MemoProbe.measured) == ["ckpt", "ckpt", "rand", "rand"]
    assert {r["variant"]["k"] for r in again.records} == {5}


def test_other_weights_in_the_checkpoint_file_make_another_memo(suite_file, tmp_path, builds):
    first = {r["model"]["name"]: r for r in _run(suite_file).records}
    _save(tmp_path / "ckpt" / "vit", seed=4)  # other weights under the same path
    builds.clear()
    second = {r["model"]["name"]: r for r in _run(suite_file).records}
    assert "ckpt" in builds and "rand" not in builds
    assert second["ckpt"]["model"]["weights_key"] != first["ckpt"]["model"]["weights_key"]
    assert second["ckpt"]["metrics"]["w"] != first["ckpt"]["metrics"]["w"]


def test_a_memo_that_does_not_hold_stops_the_run_and_is_removed(suite_file, isolated_home):
    _run(suite_file)
    for path in (isolated_home / "home" / "model_memo").glob("*.json"):
        memo = json.loads(path.read_text())
        if memo["name"] == "rand":
            memo["record_info"]["weights_key"] = "0" * 64  # no records: the model is built, and differs
            path.write_text(json.dumps(memo))
            stale = path
    with pytest.raises(model_memo.StaleMemoError, match="weights_key"):
        _run(suite_file)
    assert not stale.exists()
    _run(suite_file)  # remembered again, correctly
    assert stale.exists() and json.loads(stale.read_text())["record_info"]["weights_key"] != "0" * 64


def test_an_unreadable_memo_is_only_a_rebuild(suite_file, isolated_home, builds):
    _run(suite_file)
    for path in (isolated_home / "home" / "model_memo").glob("*.json"):
        path.write_text("{not json")
    builds.clear()
    out = _run(suite_file)
    assert sorted(builds) == ["ckpt", "pix", "rand"] and all(p.outcome.skipped for p in out.pairs)


def test_the_memo_key_covers_spec_device_inputs_libraries_and_code(monkeypatch):
    key = model_memo.memo_key("spec", "cpu", {"files": []})
    assert key == model_memo.memo_key("spec", "cpu", {"files": []})
    assert key != model_memo.memo_key("other spec", "cpu", {"files": []})
    assert key != model_memo.memo_key("spec", "cuda", {"files": []})
    assert key != model_memo.memo_key("spec", "cpu", {"files": [["/a", 1, 2]]})
    monkeypatch.setattr(model_memo, "_version", lambda name: "0.0-other")
    assert key != model_memo.memo_key("spec", "cpu", {"files": []})
    monkeypatch.undo()
    monkeypatch.setattr(model_memo, "code_stamp", lambda: "other code")
    assert key != model_memo.memo_key("spec", "cpu", {"files": []})


def test_only_sources_that_state_their_inputs_are_remembered(tmp_path):
    assert sources.source_inputs("random_init:vit_cpu_tiny,seed=1") == {"files": []}
    assert sources.source_inputs("timm:resnet18,weights=random") is None
    _save(tmp_path / "m", seed=0)
    files = sources.source_inputs(f"checkpoint:{tmp_path / 'm'}.safetensors")["files"]
    assert [f[0].rsplit(".", 1)[1] for f in files] == ["safetensors", "json"]
    shipped = sources.source_inputs("zoo:synth_dino")["files"]
    assert shipped[0][0].endswith("synth_dino.safetensors")
