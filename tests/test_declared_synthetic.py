"""A protocol's own SynthScenes data set: declared in its declaration, named in a suite as
``{synth:<protocol>}``, generated once in the cache beside SynthScenes."""
from __future__ import annotations

import sys
import textwrap

import pytest

from harness.data.declared_synthetic import declared_root, fill_declared, generate_declared
from harness.errors import ConfigError


@pytest.fixture
def declared_maker(tmp_path, monkeypatch):
    import harness.registry as registry
    from harness.declaration import ProtocolDeclaration
    from harness.metrics import Metric
    from harness.protocol_info import protocol_declaration

    (tmp_path / "maker_demo.py").write_text(textwrap.dedent('''
        from pathlib import Path
        CALLS = []
        def generate(out_dir, preset="small", seed=0, progress=True):
            out = Path(out_dir)
            if not (out / "meta.json").is_file():
                CALLS.append((preset, seed))
                out.mkdir(parents=True)
                (out / "meta.json").write_text(f'{{"preset": "{preset}", "seed": {seed}}}')
            return out
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    declared = dict(registry.protocol_declarations())
    declared["maker_demo"] = ProtocolDeclaration(name="maker_demo", module="maker_demo_protocol",
                                                 metrics=(Metric("score"),), synthetic="maker_demo")
    monkeypatch.setattr(registry, "_DECLARATIONS", declared)
    protocol_declaration.cache_clear()
    yield __import__("maker_demo")
    sys.modules.pop("maker_demo", None)
    protocol_declaration.cache_clear()


def test_a_declared_data_set_is_generated_once_beside_synthscenes(declared_maker):
    root = generate_declared("maker_demo", "tiny", 3, progress=False)
    assert root == declared_root("maker_demo", "tiny", 3) and (root / "meta.json").is_file()
    assert "synthscenes-tiny-s3" in root.name and root.name.endswith("-maker_demo")
    assert fill_declared("{synth:maker_demo}/val", "tiny", 3) == f"{root}/val"
    assert declared_maker.CALLS == [("tiny", 3)]  # the second use finds it


def test_a_suite_data_root_names_it(declared_maker, tmp_path):
    from harness.running.suite import SuiteData, SynthSpec

    data = SuiteData(tmp_path / "synth", None, "", synth=SynthSpec(preset="tiny", seed=1))
    assert data.fill("{synth:maker_demo}") == str(declared_root("maker_demo", "tiny", 1))
    assert data.fill("{synth}/imagenet") == f"{tmp_path / 'synth'}/imagenet"


def test_refusals_say_what_is_wrong(declared_maker):
    with pytest.raises(ConfigError, match="no protocol 'nope' is registered"):
        generate_declared("nope", "tiny", 0)
    with pytest.raises(ConfigError, match="declares no SynthScenes data set of its own"):
        generate_declared("knn", "tiny", 0)
    with pytest.raises(ConfigError, match="has no synth section"):
        fill_declared("{synth:maker_demo}", None, None)
