"""Registered protocols by name: the one place a protocol object is built from its name, preset
and settings (suites, paper tables, `ssl-bench eval`, the report's paper cells), and what
protocols declare about their numbers (harness.declaration), for the views that show them
(leaderboards, reports, margins, verdicts, `ssl-bench compare`, `explain`)."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

from harness.errors import SslBenchError
from harness.metrics import Metric, undeclared


def build_protocol(name: str, preset: str | None = None, values: dict[str, Any] | None = None,
                   source: str = "<command line>"):
    """The registered protocol ``name`` with its preset's settings, then ``values`` on top."""
    from harness.registry import PROTOCOLS

    return PROTOCOLS.get(name).from_preset(preset, values, source)


@lru_cache(maxsize=None)
def protocol_declaration(protocol: str):
    """The protocol's declaration (harness.declaration), None for a protocol not registered here
    (records of an absent plugin). A built-in one is read without importing its module."""
    from harness.registry import declaration

    try:
        return declaration(protocol)
    except SslBenchError:
        return None


def declared_headline(protocol: str) -> str | None:
    """The metric a registered protocol declares as its headline (e.g. top1 or mIoU); None for a
    protocol not registered here."""
    d = protocol_declaration(protocol)
    return d.headline_metric if d is not None else None


def metric_of(protocol: str, metric: str) -> Metric:
    """What ``metric`` of ``protocol`` is: its direction, unit, per-image statistic and header.
    A metric no protocol here declares reads higher-is-better, marked ``declared=False``."""
    d = protocol_declaration(protocol)
    return d.metric(metric) if d is not None else undeclared(metric)


def variant_formats(protocol: str) -> dict[str, str]:
    """How the protocol names its variants in headers; {} when unknown."""
    d = protocol_declaration(protocol)
    return dict(d.variant_labels) if d is not None else {}


def variant_text(protocol: str, variant: dict) -> str:
    """A variant as a header reads it: the protocol's declared keys first, in its order, each
    by its format (knn {"k": 20, "feature": "cls"} -> "k=20 cls"), then the others as key=value; a
    key the variant leaves out reads as the declaration's ``variant_defaults`` says."""
    formats = variant_formats(protocol)
    d = protocol_declaration(protocol)
    variant = {**(d.variant_defaults if d is not None else {}), **variant}  # what a left-out key stands for
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
