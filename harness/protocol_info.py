"""Registered protocols by name: the one place a protocol object is built from its name, preset
and settings (suites, paper tables, `ssl-bench eval`, the report's paper cells), and what
protocols declare about their numbers, for the tables that show them (leaderboards, reports,
`ssl-bench compare`, load_results(headline=True))."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

from harness.errors import SslBenchError


def build_protocol(name: str, preset: str | None = None, values: dict[str, Any] | None = None,
                   source: str = "<command line>"):
    """The registered protocol ``name`` with its preset's settings, then ``values`` on top."""
    from harness.registry import PROTOCOLS

    return PROTOCOLS.get(name).from_preset(preset, values, source)


def _declared(protocol: str, attribute: str, default):
    """What a protocol declares; a built-in one is read from its declarations without importing
    it (harness.registry); a protocol not registered here (records of an absent plugin): ``default``."""
    from harness.registry import PROTOCOLS

    try:
        return PROTOCOLS.declared(protocol, attribute, default)
    except SslBenchError:
        return default


@lru_cache(maxsize=None)
def declared_headline(protocol: str) -> str | None:
    """The metric a registered protocol declares as its headline (``HEADLINE_METRIC``, e.g.
    top1 or mIoU); None for a protocol not registered here (records of an absent plugin)."""
    return _declared(protocol, "HEADLINE_METRIC", None)


@lru_cache(maxsize=None)
def variant_formats(protocol: str) -> dict[str, str]:
    """How the protocol names its variants in headers (``VARIANT_LABELS``); {} when unknown."""
    return dict(_declared(protocol, "VARIANT_LABELS", {}) or {})


def variant_text(protocol: str, variant: dict) -> str:
    """A variant as a header reads it: the protocol's declared keys first, in its order, each
    by its format (knn {"k": 20, "feature": "cls"} -> "k=20 cls"), then the others as key=value."""
    formats = variant_formats(protocol)
    keys = [k for k in formats if k in variant] + sorted(k for k in variant if k not in formats)
    return " ".join(formats[k].format(variant[k]) if k in formats else f"{k}={variant[k]}" for k in keys)


def headline_metric(protocol: str, metrics: Iterable[str]) -> str | None:
    """The protocol's headline metric among ``metrics`` (case-insensitive), else the first."""
    metrics = list(metrics)
    want = declared_headline(protocol)
    if want:
        for m in metrics:
            if m.lower() == want.lower():
                return m
    return sorted(metrics)[0] if metrics else None


def setting_names(protocol: str) -> tuple[set[str], set[str]] | None:
    """(the settings in the fingerprint, the execution-only ones: ``NOT_IN_FINGERPRINT``) of a
    registered protocol, by the fields of its ``Config``; None for a protocol not registered here.
    A record's params hold the first and what the run reported; this tells them apart."""
    import dataclasses

    from harness.registry import PROTOCOLS

    try:
        cls = PROTOCOLS.get(protocol)
    except SslBenchError:
        return None
    names = {f.name for f in dataclasses.fields(cls.Config)}
    execution = set(cls.NOT_IN_FINGERPRINT)
    return names - execution, execution
