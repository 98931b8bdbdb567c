"""Run one protocol on one model and turn its results into records."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from harness.errors import ConfigError, DataError
from harness.runtime import distributed as dist
from harness.results import records as results
from harness.runtime.device import device_record
from harness.features.extract import leading_extractions, serve_extractions
from harness.runtime.memory import peak_rss_mb
from harness.models.handle import ModelHandle
from harness.protocol import Protocol, RunIdentity


def already_done(model: ModelHandle, protocol: Protocol, identity: RunIdentity,
                 runs_dir: Path | None = None) -> list[dict]:
    """Records of an earlier run of this exact (model weights, protocol request, data root and
    stamp: ``identity``, from ``protocol.identity(data_root, model)``). Older records match only where
    they name the same checkpoint sha256 and root: a random init's record without its weights
    key cannot tell which init seed it measured."""
    key = results.model_identity(model.record_info())
    found = results.find_records(runs_dir, protocol=protocol.registry_name, fingerprint=identity.fingerprint,
                                 model=model.name)
    return [r for r in found
            if r["protocol"]["fingerprint"] == identity.fingerprint
            and r["protocol"].get("request") == identity.request
            and all(r["protocol"].get(k) == v for k, v in identity.data.items())
            and r["protocol"]["name"] == protocol.registry_name
            and results.model_identity(r["model"]) == key
            and (r["model"].get("protocol_settings") or {}) == identity.model_settings
            and r.get("cost", {}).get("device_type", "cpu") == model.device.type
            and r["model"]["name"] == model.name]


def run_protocol(model: ModelHandle, protocol: Protocol, data_root: Path) -> list:
    """The protocol's results on ``model``: the runner evaluates a model with a protocol (the
    model knows nothing of protocols); the chance row asks the protocol what a guess scores."""
    if model.context == "chance":
        return protocol.chance_results(Path(data_root))
    check_input_sizes(protocol, model)
    return protocol.run(model, data_root)


def protocol_input_sizes(protocol) -> dict[str, int]:
    """The square input sizes a protocol feeds its model, by setting name: what it states
    (``input_sizes()``), else its config's ``crop`` (k-NN, linear), ``crop_size`` (mmseg) and
    ``input_size`` where images are resized to it (dense NN's ``resize: square``; its other
    resizing rounds each image to a multiple of the stride itself)."""
    own = getattr(protocol, "input_sizes", None)
    if callable(own):
        return dict(own())
    cfg = getattr(protocol, "cfg", None)
    sizes = {k: getattr(cfg, k, None) for k in ("crop", "crop_size")}
    if getattr(cfg, "resize", "square") == "square":
        sizes["input_size"] = getattr(cfg, "input_size", None)
    return {k: v for k, v in sizes.items() if isinstance(v, int) and not isinstance(v, bool)}


def check_input_sizes(protocol, model: ModelHandle) -> None:
    """A protocol's input sizes against the model's stride: a size the model cannot take is one
    error line before any image is read."""
    stride = getattr(model.backbone, "patch_size", None)
    if not isinstance(stride, int) or stride <= 1:
        return
    for key, size in protocol_input_sizes(protocol).items():
        if size % stride:
            lower, upper = max(stride, size // stride * stride), (size // stride + 1) * stride
            name = getattr(protocol, "registry_name", "protocol")
            raise ConfigError(f"{name}: {key} {size} is not a multiple of the stride {stride} of model {model.name} "
                              f"({model.backbone.arch}); set {key}={lower} or {upper} (eval: --set {key}=N; "
                              f"run: --set {name}.{key}=N, or {key}: N in the suite entry's set)")


def _measure(model: ModelHandle, protocol: Protocol, data_root: Path) -> list:
    """The protocol's results. Under torchrun, rank 0 runs the protocol while the others
    extract their shares of its features, then receive its results: the numbers are computed
    once, not once per rank."""
    if dist.world_size() == 1 or protocol.RUNS_ON_EVERY_RANK:
        return run_protocol(model, protocol, data_root)
    if not dist.is_main():
        status, value = serve_extractions(model)
        if status != "ok":
            raise RuntimeError(f"rank 0 failed while running {protocol.registry_name}: {value}")
        return value
    try:
        with leading_extractions():
            outputs = run_protocol(model, protocol, data_root)
    except BaseException as exc:
        dist.broadcast_object(("done", ("failed", f"{type(exc).__name__}: {exc}")))
        raise
    dist.broadcast_object(("done", ("ok", outputs)))
    return outputs


def evaluate(model: ModelHandle, protocol: Protocol, data_root: Path, *, preset: str | None = None,
             runs_dir: Path | None = None, force: bool = False) -> tuple[list[dict], bool]:
    """Returns (records, skipped). Records are written only after the whole protocol run
    succeeded, so a failing run leaves no partial results."""
    try:
        return _evaluate(model, protocol, data_root, preset=preset, runs_dir=runs_dir, force=force)
    except DataError as exc:
        raise with_check_hint(exc, protocol, data_root) from exc


def with_check_hint(exc: DataError, protocol: Protocol, data_root: Path) -> DataError:
    """A reader's data error, ending with the `ssl-bench data check` command that explains it
    (when the protocol's data set is catalogued)."""
    from harness.data.catalogue import resolve
    from harness.data.check import hint

    dataset = protocol.settings().get("dataset")
    try:
        resolve(str(dataset))
    except ConfigError:
        return exc
    text = str(exc)
    return exc if "ssl-bench data check" in text else DataError(f"{text}; {hint(dataset, data_root)}")


def _evaluate(model: ModelHandle, protocol: Protocol, data_root: Path, *, preset: str | None,
              runs_dir: Path | None, force: bool) -> tuple[list[dict], bool]:
    identity = protocol.identity(data_root, model)
    if not force:
        done = already_done(model, protocol, identity, runs_dir)
        if done:
            return done, True
    if model.device.type == "cuda":  # the peak of this measurement, not of the process so far
        torch.cuda.reset_peak_memory_stats(model.device)
    t0 = time.perf_counter()
    outputs = _measure(model, protocol, Path(data_root))
    wall = time.perf_counter() - t0
    # the device that did the work (the model's), never merely one that exists
    cost = {"wall_s": round(wall, 3), "peak_rss_mb": round(peak_rss_mb(), 1),
            **device_record(model.device, protocol.precision(), dist.world_size())}
    if model.device.type == "cuda":
        cost["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated(model.device) / 2**20, 1)
    records = []
    for flag in dict.fromkeys(f for out in outputs for f in out.flags):  # said once, where it is measured
        print(f"note: {flag}", file=sys.stderr)
    for out in outputs:
        proto_block = {"name": protocol.registry_name, "preset": preset, "dataset": out.dataset,
                       "split": out.split, "params": {**protocol.settings(), **out.params},
                       "fingerprint": identity.fingerprint, "request": identity.request, **identity.data}
        model_block = {**model.record_info(),  # what the protocol built for this model is the model's
                       **({"protocol_settings": identity.model_settings} if identity.model_settings else {})}
        rec = results.make_record(model_block, proto_block, out.seed, out.variant,
                                  out.metrics, {**out.cost, **cost}, out.artifacts,  # the harness's keys win
                                  per_image=out.per_image, metrics_undefined=out.metrics_undefined,
                                  flags=out.flags)
        if dist.is_main():  # under torchrun every rank holds the same numbers
            results.write_record(rec, runs_dir, force=True)
        records.append(rec)
    return records, False
