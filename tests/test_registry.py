import pytest

from harness.errors import RegistryError
from harness.registry import METHODS, PROTOCOLS, Registry


def test_duplicate_name_is_an_error_naming_both():
    reg = Registry("widget")

    @reg.register("a")
    class A:
        pass

    with pytest.raises(RegistryError, match="duplicate widget name 'a'"):
        @reg.register("a")
        class B:
            pass


def test_unknown_name_lists_what_exists():
    with pytest.raises(RegistryError) as exc:
        METHODS.get("no-such-method")
    assert "dino" in str(exc.value) and "unknown method" in str(exc.value)


def test_builtin_protocols_are_registered():
    assert "knn" in PROTOCOLS.names()


def test_entry_point_plugins_are_loaded(monkeypatch):
    import harness.registry as r

    class FakeEP:
        name, value = "myplugin", "myplugin:Thing"

        def load(self):
            reg.register("from-plugin")(type("Plugin", (), {}))

    reg = Registry("method")
    monkeypatch.setattr(r, "entry_points", lambda group: [FakeEP()] if group == "ssl_bench.methods" else [])
    assert reg.names() == ["from-plugin"]


def test_broken_plugin_is_reported(monkeypatch):
    import harness.registry as r

    class BrokenEP:
        name, value = "broken", "broken:Thing"

        def load(self):
            raise ImportError("boom")

    reg = Registry("protocol")
    monkeypatch.setattr(r, "entry_points", lambda group: [BrokenEP()])
    with pytest.raises(RegistryError, match="broken.*failed to load: boom"):
        reg.names()
