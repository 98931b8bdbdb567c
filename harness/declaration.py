"""What a protocol declares about itself, as data: the one place its name, module, metrics,
headline, variant labels and data readers are written.

A protocol folder holds a torch-free ``declaration.py`` whose ``DECLARATIONS`` is a tuple of
:class:`ProtocolDeclaration`. The registry (harness.registry) finds these files in the packages
that the ``ssl_bench.protocol_packages`` entry-point group names (ssl-bench's own ``benchmarks``
among them), so the core lists no protocol; the tables read metrics and headlines from them
without importing the protocol's module (and torch with it); the protocol's module is imported
when the protocol is asked for by name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from harness.metrics import Metric, metric_table, undeclared

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class ProtocolDeclaration:
    """``name``: the registered name (records, suites, ``--protocol``). ``module``: the module whose
    import registers the protocol class. ``metrics``: every metric it reports, its headline first
    unless ``headline`` names another. ``variant_labels``: variant key -> header format
    ({"k": "k={}"} reads "k=20"). ``datasets``: dataset name -> module registering its reader,
    for readers that live in the protocol's folder. ``per_image_kinds``: per-image statistic kind
    -> module defining it (harness.per_image.register_kind), for kinds of the protocol's own.
    ``variant_defaults``: variant key -> the value a result that leaves the key out stands for, shown
    in its header all the same (a linear probe's paper column reads "[eval-split best]" beside its
    "[holdout best]" column). ``synthetic``: a module whose ``generate(out_dir, preset="small", seed=0, progress=True)``
    writes the protocol's SynthScenes data set (idempotent, atomic); suites name its folder
    ``{synth:<protocol>}``. ``reads``: the data set keys the protocol reads through readers declared
    elsewhere (harness/data's, another folder's), so that ``ssl-bench data list`` names its readers."""

    name: str
    module: str
    metrics: tuple[Metric, ...]
    headline: str | None = None
    variant_labels: Mapping[str, str] = field(default_factory=dict)
    variant_defaults: Mapping[str, str] = field(default_factory=dict)
    datasets: Mapping[str, str] = field(default_factory=dict)
    per_image_kinds: Mapping[str, str] = field(default_factory=dict)
    synthetic: str | None = None
    summary: str = ""
    reads: tuple[str, ...] = ()

    def __post_init__(self):
        if not _NAME.match(self.name or ""):
            raise ValueError(f"protocol name {self.name!r}: lower-case letters, digits and _, starting with a letter")
        for what, module in [("module", self.module), *(("dataset " + k, v) for k, v in self.datasets.items()),
                             *(("per-image kind " + k, v) for k, v in self.per_image_kinds.items()),
                             *([("synthetic", self.synthetic)] if self.synthetic is not None else [])]:
            if not isinstance(module, str) or not _MODULE.match(module):
                raise ValueError(f"protocol {self.name!r}: {what} must be a dotted module path, found {module!r}")
        table = metric_table(self.metrics)
        if not table:
            raise ValueError(f"protocol {self.name!r} declares no metric")
        if self.headline is not None and self.headline not in table:
            raise ValueError(f"protocol {self.name!r}: headline {self.headline!r} is not among its metrics "
                             f"({', '.join(table)})")
        object.__setattr__(self, "metrics", tuple(self.metrics))
        object.__setattr__(self, "reads", tuple(self.reads))
        object.__setattr__(self, "variant_labels", dict(self.variant_labels))
        object.__setattr__(self, "variant_defaults", dict(self.variant_defaults))
        unlabelled = [k for k in self.variant_defaults if k not in self.variant_labels]
        if unlabelled:
            raise ValueError(f"protocol {self.name!r}: variant_defaults {unlabelled} have no variant_labels entry")

    @property
    def headline_metric(self) -> str:
        return self.headline or self.metrics[0].name

    def metric(self, name: str) -> Metric:
        """The declared metric ``name`` (case-insensitive); an undeclared one reads higher-is-better."""
        for m in self.metrics:
            if m.name.lower() == name.lower():
                return m
        return undeclared(name)


def declaration_of_class(name: str, cls) -> ProtocolDeclaration:
    """The declaration of a protocol class registered without a declaration file (a plugin
    registered through the ``ssl_bench.protocols`` entry points): its ``METRICS``, else one
    higher-is-better metric per ``HEADLINE_METRIC``; its ``VARIANT_LABELS``."""
    metrics = tuple(getattr(cls, "METRICS", ()) or ())
    headline = getattr(cls, "HEADLINE_METRIC", None)
    if not metrics:
        metrics = (Metric(headline or "score", unit=""),)
    return ProtocolDeclaration(name=name, module=cls.__module__, metrics=metrics,
                               headline=headline if headline in {m.name for m in metrics} else None,
                               variant_labels=dict(getattr(cls, "VARIANT_LABELS", {}) or {}))
