from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.config import apply_overrides, fingerprint, from_dict, load_config
from harness.errors import ConfigError


@dataclass
class Inner:
    k: int = 20
    temps: tuple[float, float] = (0.04, 0.07)


@dataclass
class Outer:
    name: str = "x"
    lr: float = 1e-3
    inner: Inner = field(default_factory=Inner)
    mode: str | None = None


def test_base_inheritance_and_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text("a: 1\nb: {c: 2, d: 3}\n")
    (tmp_path / "child.yaml").write_text("_base_: base.yaml\nb: {d: 4}\ne: 5\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert cfg["a"] == 1 and cfg["b"] == {"c": 2, "d": 4} and cfg["e"] == 5
    cfg = apply_overrides(cfg, ["b.c=1e-4", "f.g=[1, 2]", "a=true"])
    assert cfg["b"]["c"] == 1e-4 and cfg["f"] == {"g": [1, 2]} and cfg["a"] is True


def test_unknown_key_names_key_and_file(tmp_path):
    (tmp_path / "bad.yaml").write_text("lr: 0.1\ninner: {k: 5, kk: 1}\n")
    raw = load_config(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError) as exc:
        from_dict(Outer, raw, raw["_source_"])
    msg = str(exc.value)
    assert "'kk'" in msg and "bad.yaml" in msg and "allowed keys" in msg


def test_errors_about_overrides_blame_the_override(tmp_path):
    (tmp_path / "ok.yaml").write_text("lr: 0.1\ninner: {k: 5}\n")
    raw = apply_overrides(load_config(tmp_path / "ok.yaml"), ["inner.kk=1"])
    with pytest.raises(ConfigError) as exc:
        from_dict(Outer, raw, raw["_source_"])
    assert str(exc.value).startswith("command line --set 'inner.kk=1': unknown key(s) 'kk'")
    raw = apply_overrides(load_config(tmp_path / "ok.yaml"), ["inner={k: 1, kk: 2}"], origin="suite set:")
    with pytest.raises(ConfigError, match=r"^suite set: 'inner=\{k: 1, kk: 2\}': unknown key"):
        from_dict(Outer, raw, raw["_source_"])
    raw = apply_overrides(load_config(tmp_path / "ok.yaml"), ["inner.temps=[1, 2, 3]", "lr=0.2"])
    with pytest.raises(ConfigError, match=r"^command line --set 'inner.temps=\[1, 2, 3\]': 'inner.temps' must have"):
        from_dict(Outer, raw, raw["_source_"])
    # a bad value in the file still names the file, even with overrides elsewhere
    (tmp_path / "bad.yaml").write_text("lr: fast\n")
    raw = apply_overrides(load_config(tmp_path / "bad.yaml"), ["inner.k=3"])
    with pytest.raises(ConfigError, match=r"bad.yaml: 'lr' must be a number"):
        from_dict(Outer, raw, raw["_source_"])


def test_types_are_checked():
    with pytest.raises(ConfigError, match="must be a number"):
        from_dict(Outer, {"lr": "fast"})
    with pytest.raises(ConfigError, match="must have 2 items"):
        from_dict(Outer, {"inner": {"temps": [1.0]}})
    cfg = from_dict(Outer, {"lr": 1, "inner": {"temps": [0.1, 0.2]}})
    assert cfg.lr == 1.0 and cfg.inner.temps == (0.1, 0.2)


def test_circular_base_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("_base_: b.yaml\n")
    (tmp_path / "b.yaml").write_text("_base_: a.yaml\n")
    with pytest.raises(ConfigError, match="circular"):
        load_config(tmp_path / "a.yaml")


def test_missing_file_is_an_error():
    with pytest.raises(ConfigError, match="not found"):
        load_config("definitely/not/here.yaml")


def test_fingerprint_is_stable_and_order_free():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert fingerprint(Outer()) == fingerprint(Outer())
    # a committed value: changing the hashing silently would orphan every cache and record
    assert fingerprint({"k": 20, "temperature": 0.07}) == "0dbba8ba2fb59ec5"


@pytest.mark.parametrize("suite_file",
                         sorted((Path(__file__).resolve().parent.parent / "configs" / "suites").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_suite_resolves(suite_file):
    # each model's pretraining config (with its overrides) and each protocol's preset + settings
    # build without error, so a typo in a suite fails here and not 20 minutes into a run
    from harness.running.suite import load_suite, model_entries, pretrain_config, suite_protocol

    suite, source = load_suite(suite_file)
    assert suite.models and suite.protocols
    for entry in model_entries(suite):
        if entry.pretrain:
            pretrain_config(entry, Path("/nonexistent"), "x")
    for p in suite.protocols:
        suite_protocol(p, source)


def test_a_suite_without_progress_bars_asks_for_the_same_records():
    # --no-progress reaches every protocol that draws bars, and finds the records a run with
    # bars wrote: the switch is in neither the fingerprint nor the request
    from harness.running.suite import load_suite, suite_protocol

    suite_file = Path(__file__).resolve().parent.parent / "configs" / "suites" / "default.yaml"
    suite, source = load_suite(suite_file)
    with_bars = [suite_protocol(p, source) for p in suite.protocols]
    quiet = [suite_protocol(p, source, progress=False) for p in suite.protocols]
    drawing = [q for q in quiet if hasattr(q.cfg, "progress")]
    assert drawing and not any(q.cfg.progress for q in drawing)
    assert any(b.cfg.progress for b in with_bars if hasattr(b.cfg, "progress"))
    for b, q in zip(with_bars, quiet):
        assert (b.fingerprint(), b.request_hash()) == (q.fingerprint(), q.request_hash())
