"""The Protocol contract every evaluation protocol (built-in or plugin) follows."""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.config import fingerprint, from_dict, to_dict
from harness.errors import ConfigError, NotApplicable
from harness.models.handle import ModelHandle
from harness.paths import results_dir


# Settings that ask for nothing while empty, left out of the request hash then: a protocol that
# gains one (a training subset, a selection holdout) keeps the requests, and so the records, it had
# without it.
OMITTED_WHEN_EMPTY = ("train_subset", "selection_holdout", "selection_seed")
_NOTED: set[tuple[str, str]] = set()  # (protocol, old setting name) a note was printed for
_NOTED_KEYS: set[str] = set()  # data set names a process checked for an old key


def _served_dataset(cfg):
    """``cfg`` with its data set named by the reader key that serves it: ``KEY:LAYOUT`` (one key per
    data set, harness.data.catalogue) becomes that layout's reader key, the name the fingerprint
    and the records keep; an old key (a layout's reader key) stays, with one line on stderr."""
    name = getattr(cfg, "dataset", None)
    if not isinstance(name, str):
        return cfg
    from harness.data.catalogue import alias_note, reader_key

    if ":" in name:
        return dataclasses.replace(cfg, dataset=reader_key(name))
    if name not in _NOTED_KEYS:
        _NOTED_KEYS.add(name)
        try:
            note = alias_note(name)
        except ConfigError:  # a protocol's own name for a data set (not catalogued)
            note = None
        if note:
            print(note, file=sys.stderr)
    return cfg


@dataclass
class ProtocolResult:
    """One measured number set: becomes one result record."""

    metrics: dict[str, float]
    dataset: str
    split: str
    seed: int | None = None
    variant: dict[str, Any] = field(default_factory=dict)  # e.g. {"fraction": "1/8"} or {"k": 20}
    params: dict[str, Any] = field(default_factory=dict)  # extra settings to record
    artifacts: dict[str, str] = field(default_factory=dict)  # paths of files kept beside
    # seconds by stage of the run (e.g. extract_s, search_s), merged into the record's cost
    # block beside the harness's own wall time; never part of a fingerprint or a cache key
    cost: dict[str, float] = field(default_factory=dict)
    # per-evaluation-image statistics (harness.per_image) from which the metrics can be recomputed
    # on a resample of the images (the leaderboard's bootstrap interval where n = 1); data about
    # the measurement, never part of a fingerprint, a record key or a cache key
    per_image: dict[str, Any] | None = None
    # why a metric has no value (None, or NaN, in ``metrics``), by name: the record keeps the metric
    # as null and this reason in its ``metrics_undefined`` block (strict JSON has no NaN)
    metrics_undefined: dict[str, str] = field(default_factory=dict)
    # what the numbers cannot say though they exist (a feature grid below the protocol's minimum,
    # harness.features.grid): kept in the record's ``flags`` and printed when the record is made
    flags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunIdentity:
    """What keys a protocol request's run on a data root: its records (and the check for
    earlier ones) and the folder of its artifacts."""

    fingerprint: str  # the settings that can change the number
    request: str  # the whole request, execution settings included
    data: dict[str, str]  # the data root, resolved, and its stamp (harness.data.io.data_identity)
    # what the protocol builds differently for the model (Protocol.model_settings): kept in the
    # record's model block as ``protocol_settings`` and matched when earlier records are looked
    # up, never in the fingerprint (which describes the protocol, the same for every model)
    model_settings: dict[str, Any] = field(default_factory=dict)


class Protocol:
    """Subclasses set ``Config`` (a dataclass) and implement ``run``; they may override
    ``chance_results`` (the chance row) and ``conformance_check``, and set the class
    attributes below.

    ``fingerprint()`` hashes every setting in the config except those listed in
    ``NOT_IN_FINGERPRINT`` (settings that cannot change the number, such as batch size
    for inference or a progress-bar switch)."""

    Config: ClassVar[type]  # must have a `dataset: str` field (a registered dataset name)
    NOT_IN_FINGERPRINT: ClassVar[tuple[str, ...]] = ()
    # Settings a protocol gained after its first records, at the values that ask for what those
    # records measured: left out of the fingerprint and the request hash while at them, so that the
    # old records stay its records.
    ABSENT_AT: ClassVar[dict[str, Any]] = {}
    # Settings renamed after records were written under their first name: field -> that first
    # name, which the fingerprint, the request hash and the records keep (the records stay this
    # protocol's), and which presets, suites and --set may still give, with a one-line note.
    RECORDED_AS: ClassVar[dict[str, str]] = {}
    # Named recipes: preset name -> config values (e.g. dense_nn "cribo" / "hbird",
    # linear "dino" / "ibot" / "synclr"). The CLI's --preset picks one.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    DEFAULT_PRESET: ClassVar[str | None] = None
    # What the protocol reports (metrics with their direction, headline, variant labels) is
    # declared once, as data, in its folder's declaration.py (harness.declaration), and read
    # through ``declaration()``; a plugin registered without one may state ``METRICS`` (a tuple of
    # harness.metrics.Metric), ``HEADLINE_METRIC`` and ``VARIANT_LABELS`` on the class instead.
    # The run the conformance suite (harness/conformance.py) makes to show that a method's
    # exported backbone works here, on the tiny SynthScenes root: (preset, config values, folder
    # under that root). None, with ``conformance_check`` not overridden: the protocol declares no
    # check, and the conformance report says it was skipped.
    CONFORMANCE_RUN: ClassVar[tuple[str | None, dict[str, Any], str] | None] = None
    # Under torchrun, a protocol runs on rank 0 while the other ranks extract their shares of
    # its features (harness/running/evaluate.py). One that spreads its own work over the processes
    # (the mmseg protocols: mmengine's distributed launcher) sets this and runs on every rank.
    RUNS_ON_EVERY_RANK: ClassVar[bool] = False
    registry_name: ClassVar[str] = "?"

    @classmethod
    def declaration(cls):
        """This protocol's declaration (harness.declaration.ProtocolDeclaration)."""
        from harness.registry import declaration

        return declaration(cls.registry_name)

    def __init__(self, cfg=None, source: str = "<defaults>"):
        if cfg is None or isinstance(cfg, dict):
            cfg = from_dict(self.Config, self._renamed(cfg or {}, source), source)
        self.cfg = _served_dataset(cfg)

    @classmethod
    def _renamed(cls, values: dict[str, Any], source: str) -> dict[str, Any]:
        """``values`` with each old name of a renamed setting (``RECORDED_AS``) given its field's
        name, and one line on stderr per old name a process reads."""
        for new, old in cls.RECORDED_AS.items():
            if old not in values:
                continue
            if new in values:
                raise ConfigError(f"{source}: give {new!r} or its old name {old!r}, not both")
            values = {(new if k == old else k): v for k, v in values.items()}
            if (cls.registry_name, old) not in _NOTED:
                _NOTED.add((cls.registry_name, old))
                print(f"note: {cls.registry_name}'s setting {old!r} is named {new!r}; the old name keeps "
                      "working for a release", file=sys.stderr)
        return values

    @classmethod
    def from_preset(cls, preset: str | None = None, values: dict[str, Any] | None = None,
                    source: str = "<command line>") -> "Protocol":
        """Config = preset values, then ``values`` on top (from YAML / --set / CLI flags)."""
        preset = preset or cls.DEFAULT_PRESET
        base: dict[str, Any] = {}
        if preset is not None:
            if preset not in cls.PRESETS:
                raise ConfigError(f"unknown preset {preset!r} for protocol {cls.registry_name!r}; "
                                  f"known presets: {', '.join(sorted(cls.PRESETS)) or '(none)'}")
            base = cls._renamed(dict(cls.PRESETS[preset]), f"preset {preset!r}")
        return cls({**base, **cls._renamed(values or {}, source)}, source)

    @classmethod
    def conformance_check(cls, model: ModelHandle, exported: dict, data_root: Path) -> dict | None:
        """What this protocol measures on ``model`` (a method's ``exported`` backbone, loaded)
        in its ``CONFORMANCE_RUN``; None when it declares no check."""
        if cls.CONFORMANCE_RUN is None:
            return None
        preset, values, folder = cls.CONFORMANCE_RUN
        return cls.from_preset(preset, values).run(model, Path(data_root) / folder)[0].metrics

    def _without_absent(self, d: dict[str, Any]) -> dict[str, Any]:
        """The settings as records keep them: none at its ``ABSENT_AT`` value, each under the name
        it is recorded as (``RECORDED_AS``), in the config's order."""
        return {self.RECORDED_AS.get(k, k): v for k, v in d.items()
                if k not in self.ABSENT_AT or v != self.ABSENT_AT[k]}

    def settings(self) -> dict[str, Any]:
        d = self._without_absent(to_dict(self.cfg))
        for k in self.NOT_IN_FINGERPRINT:
            d.pop(k, None)
        return d

    def fingerprint(self, extra: dict[str, Any] | None = None) -> str:
        return fingerprint({"protocol": self.registry_name, **self.settings(), **(extra or {})})

    def request_hash(self) -> str:
        """Hash of the whole request, execution settings included: asking for more (e.g. more
        k values, which are not in the fingerprint since each k is its own record) runs again.
        Whether progress bars are drawn asks for nothing: it is left out."""
        request = self._without_absent(to_dict(self.cfg))
        request.pop("progress", None)
        for name in OMITTED_WHEN_EMPTY:  # an empty one asks for nothing more than its absence did
            if name in request and not request[name]:
                request.pop(name)
        return fingerprint({"protocol": self.registry_name, **request})

    def model_settings(self, model: ModelHandle) -> dict[str, Any]:
        """What this protocol builds differently for ``model``, beyond the model's own identity
        (the mmseg protocols: the backbone wrapper and head of a model their ViT cannot load).
        What the model brings is the model's: the records keep it in their model block
        (``protocol_settings``) and the fingerprint stays the protocol's, one for every model.
        Default: nothing."""
        return {}

    def identity(self, data_root: Path, model: ModelHandle | None = None) -> RunIdentity:
        """This request's identity on ``data_root`` (for ``model``, whose ``model_settings`` it
        carries beside the fingerprint): harness.running.evaluate asks for it first, to find earlier records and
        to key the new ones; ``artifact_dir`` keys its folder by the same object. Computed once per
        (data root, request, model settings): reading the data stamp walks the data set."""
        # harness.data imports every reader: the contract loads it only when asked
        from harness.data.io import data_identity

        request = self.request_hash()
        # a model may already know what this protocol builds for it (harness.running.model_memo's
        # DeferredModel remembers it, where asking the protocol would build the model)
        remembered = getattr(model, "known_settings", None)
        extra = remembered(self) if remembered is not None else None
        if extra is None:
            extra = self.model_settings(model) if model is not None else {}
        known = self.__dict__.setdefault("_identities", {})
        key = (str(data_root), request, fingerprint(extra) if extra else "")
        if key not in known:
            data = self.__dict__.setdefault("_data_identities", {})
            if str(data_root) not in data:
                data[str(data_root)] = data_identity(data_root)
            known[key] = RunIdentity(self.fingerprint(), request, data[str(data_root)], dict(extra or {}))
        return known[key]

    def precision(self) -> str:
        """The arithmetic the protocol computes in (fp32 | fp16 | bf16), for the records."""
        return getattr(self.cfg, "precision", "fp32")

    def artifact_dir(self, model: ModelHandle, data_root: Path, base: str | Path | None = None) -> Path:
        """The folder for the files the records of one run point to (confusion matrices,
        subset lists, ...): keyed like those records, by the model's weights and name, the data
        (resolved root and stamp) and the whole protocol request, so that no other model's,
        data set's or request's run writes there. Within it, files are named by what tells the
        run's records apart (split, seed, variant). ``base``: default results/runs/<protocol>/."""
        identity = self.identity(data_root, model)
        key = fingerprint({"weights": model.cache_key, "model": model.name, "data": identity.data,
                           "request": identity.request}, length=20)
        return Path(base or results_dir() / "runs" / self.registry_name) / key

    def check_processes(self, world_size: int) -> None:
        """Refuse (ConfigError) a request that cannot run on ``world_size`` data-parallel processes,
        before any job is submitted (harness/running/launch.py); only protocols that run on every
        rank are asked."""

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        raise NotImplementedError

    def examples(self, model: ModelHandle, data_root: Path, count: int = 4, seed: int = 0) -> list:
        """``count`` evaluation items drawn with ``seed``, each as panels (harness.examples: the
        input as the model saw it after this protocol's transform, the target, the prediction),
        for `ssl-bench show`. A protocol that draws none keeps this default."""
        raise NotApplicable(f"protocol {self.registry_name!r} draws no examples (it defines no "
                            "examples(model, data_root, count, seed))")

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """What a uniform random guess scores, for the chance row (harness/context/chance.py):
        the same datasets, splits, variants and seeds as ``run``, with chance-level metrics
        computed from the evaluation split's labels. A protocol that cannot state it keeps this
        default, and suites skip the pair."""
        raise NotApplicable(f"protocol {self.registry_name!r} does not state its chance level "
                            "(it defines no chance_results(data_root))")
