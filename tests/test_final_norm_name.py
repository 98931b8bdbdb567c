"""The final-LayerNorm flag is ``final_norm`` everywhere (``get_features``, ``extract_features``,
protocol configs); ``norm`` is only a model spec's input mean / std. The protocols that had their
own name for it (``backbone_norm``, ``feature_norm``) keep it in their fingerprints, request
hashes and records (``Protocol.RECORDED_AS``), so their records stay theirs, and still read it
from presets, suites and ``--set`` with a one-line note."""
from __future__ import annotations

import inspect

import pytest

from harness.errors import ConfigError
from harness.protocol_info import build_protocol

# (protocol, preset) -> (fingerprint, request hash), computed before the rename by
# `build_protocol(name, preset, {})` then `.fingerprint()` / `.request_hash()` at main e5afe3a
# (the configs still named the flag backbone_norm / feature_norm); hashes of strings, no floats.
BEFORE = {
    ("depth_linear", "dinov2_linear4"): ("9a2db3d999976445", "ad276237684687b9"),
    ("depth_linear", "synth"): ("78daedfe8cd189b8", "bcc917d718be316a"),
    ("dense_nn", "cribo"): ("a98a2efcd5613265", "66e934ecad2a4c4b"),
    ("dense_nn", "hbird"): ("cdaec79221919e10", "4eae4b4a44e50d75"),
    ("correspondence", "probe3d"): ("5d26ac523065b821", "aea0dc23b93bfd09"),
    ("correspondence_navi", "synth"): ("a7467037778b42e5", "bb575005e71562b0"),
}
OLD_NAME = {"depth_linear": "backbone_norm", "dense_nn": "feature_norm", "correspondence": "backbone_norm",
            "correspondence_navi": "backbone_norm"}


@pytest.mark.parametrize("name,preset", sorted(BEFORE))
def test_identity_is_the_one_before_the_rename(name, preset):
    protocol = build_protocol(name, preset, {})
    assert (protocol.fingerprint(), protocol.request_hash()) == BEFORE[(name, preset)]
    settings = protocol.settings()
    assert OLD_NAME[name] in settings and "final_norm" not in settings  # what the records keep
    assert settings[OLD_NAME[name]] == protocol.cfg.final_norm


@pytest.mark.parametrize("name", sorted(OLD_NAME))
def test_the_old_name_still_works_with_a_note(name, capsys):
    preset = next(p for n, p in sorted(BEFORE) if n == name)
    new = build_protocol(name, preset, {"final_norm": False})
    old = build_protocol(name, preset, {OLD_NAME[name]: False})
    assert old.cfg.final_norm is False and old.fingerprint() == new.fingerprint()
    assert old.request_hash() == new.request_hash()
    build_protocol(name, preset, {OLD_NAME[name]: False})
    err = capsys.readouterr().err
    assert err.count(f"{OLD_NAME[name]!r} is named 'final_norm'") <= 1  # once per process
    with pytest.raises(ConfigError, match="not both"):
        build_protocol(name, preset, {OLD_NAME[name]: False, "final_norm": True})


def test_feature_paths_name_it_final_norm():
    from harness.features.cache import feature_key
    from harness.features.extract import batch_features, extract_features
    from harness.context.pixels import PixelBackbone
    from harness.models.backbone import ViTBackbone
    from harness.models.feature_backbone import AdaptedBackbone

    for fn in (extract_features, batch_features, feature_key, ViTBackbone.get_features,
               AdaptedBackbone.get_features, PixelBackbone.get_features):
        params = inspect.signature(fn).parameters
        assert "final_norm" in params and "norm" not in params, fn.__qualname__
