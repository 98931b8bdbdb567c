"""End-to-end fine-tuning (``finetune``): the model's backbone and a linear head trained together,
as iBOT's (BEiT's) ``evaluation/classification_layer_decay/run_class_finetuning.py`` does
(bytedance/ibot at da316d8). The settings: benchmarks.finetune.config; the network:
benchmarks.finetune.model; one micro-step: benchmarks.finetune.step; the loop:
benchmarks.finetune.train.

One result per run: ``top1`` / ``top5`` after the last epoch, ``top1_best`` the best evaluation's
top-1 (what the official script prints as "Max accuracy" and the papers report), the history of
every evaluation in ``params``, the share of time spent waiting for data in ``cost``. The
fine-tuned backbone is written as a harness checkpoint (``finetuned.safetensors`` beside its
``.json``, with provenance) in the run's artifact folder, where every protocol's ``--checkpoint``
reads it (an adapted model's: a weights file for its own spec, benchmarks.finetune.checkpoint;
the record's ``checkpoint_spec`` loads either); ``resume.pt`` there lets a killed run go on to the same numbers.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.finetune.sampler import steps_per_epoch as ra_steps
from benchmarks.finetune.config import EXECUTION_SETTINGS, FinetuneConfig, per_device_batch
from harness.config import fingerprint, to_dict
from harness.data.subsets import SubsetSource, TrainSubsetSetting
from harness.errors import ConfigError, DataError, NotApplicable
from harness.training.layer_decay import layer_scheme
from harness.models.handle import ModelHandle
from harness.per_image import hits_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol
from harness.runtime import device as devices
from harness.runtime import distributed as dist

__all__ = ["EXECUTION_SETTINGS", "FinetuneConfig", "FinetuneProtocol", "per_device_batch"]

# settings a run may resume with other values of: they do not change the trajectory up to the stop
RESUMABLE_CHANGES = EXECUTION_SETTINGS + ("max_steps",)


@register_protocol("finetune")
class FinetuneProtocol(TrainSubsetSetting, Protocol):
    Config = FinetuneConfig
    NOT_IN_FINGERPRINT = EXECUTION_SETTINGS
    PRESETS = load_presets("finetune", Path(__file__).parent / "presets")
    DEFAULT_PRESET = None
    RUNS_ON_EVERY_RANK = True  # data parallel: every process trains its share
    # settings left out of the fingerprint at these values (a recipe without them keeps its fingerprint)
    ABSENT_AT = {"normalization": None, "eval_interpolation": "bilinear", "repeated_aug": False,
                 "head_outputs": "classes", "lr_schedule": "per_step", "warmup_lr": 0.0,
                 "use_no_weight_decay_list": True}

    def input_sizes(self) -> dict[str, int]:
        return {"input_size": self.cfg.input_size}

    def readers(self, data_root: Path):
        c = self.cfg
        reader = DATASETS.get(c.dataset)
        splits = {}
        for split in (c.train_split, c.val_split):
            try:
                splits[split] = reader(data_root, split)
            except DataError as exc:
                raise DataError(f"finetune: the recipe needs the {split!r} split of {c.dataset} at {data_root}; "
                                f"{exc}") from exc
        train, val = splits[c.train_split], splits[c.val_split]
        subset = self.train_subset()
        if subset is not None:
            train = SubsetSource(train, subset)
        if len(train) < c.batch_size:
            raise DataError(f"finetune: {c.dataset} {c.train_split!r} at {data_root} has {len(train)} images, fewer "
                            f"than one effective batch of {c.batch_size}; lower batch_size")
        if c.repeated_aug and ra_steps(len(train), c.batch_size) == 0:
            raise DataError(f"finetune: repeated augmentation trains on floor(n / 256) x 256 = "
                            f"{len(train) // 256 * 256} entries an epoch of {c.dataset} {c.train_split!r} "
                            f"({len(train)} images), fewer than one effective batch of {c.batch_size}")
        if len(val) == 0:
            raise DataError(f"finetune: {c.dataset} {c.val_split!r} at {data_root} has no images")
        return train, val

    def recipe_identity(self, model: ModelHandle, data_root: Path) -> str:
        """What a resume file must have been written by: the trajectory's settings, the starting
        weights and the data."""
        settings = {k: v for k, v in to_dict(self.cfg).items() if k not in RESUMABLE_CHANGES}
        subset = self.train_subset()
        head = model.meta.get("source_sha256") if self.cfg.finetune_head_layer else None
        return fingerprint({"settings": settings, "subset": subset.content_sha256 if subset else None,
                            "weights": model.cache_key, **({"head_from": head} if head else {}),
                            "data": self.identity(data_root, model).data}, length=40)

    def check_processes(self, world_size: int) -> None:
        per_device_batch(self.cfg, world_size)  # the effective batch must split over the processes

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        from benchmarks.finetune import data as ftdata
        from benchmarks.finetune.model import FinetuneClassifier
        from benchmarks.finetune.train import FinetuneRun

        c = self.cfg
        if model.context == "pixels" or not any(p.requires_grad for p in model.backbone.parameters()):
            raise NotApplicable(f"finetune trains a network; {model.name} has no trainable weights")
        if c.resume and not Path(c.resume).is_file():
            raise ConfigError(f"finetune: resume file {c.resume} not found; leave resume unset to go on from the "
                              f"run's own resume.pt")
        if c.layer_decay < 1.0:  # a model without blocks to decay fails before any work
            layer_scheme(model.backbone)
        device = devices.prepare(devices.resolve_device(c.device), c.precision, backward=True)
        dist.init_from_env(device)
        self.check_processes(dist.world_size())  # an unreachable effective batch fails before any work
        head_layers = self._head_layers(model)
        self._check_saveable(model)
        train, val = self.readers(Path(data_root))
        outputs, offset = head_outputs(c, train)
        val_labels = _labels_in(train, val) + offset
        train_labels = np.asarray(train.targets, dtype=np.int64) + offset
        train_set = ftdata.TransformedImages(train, train_labels, ftdata.train_transform(c), c.seed)
        val_set = ftdata.TransformedImages(val, val_labels, ftdata.eval_transform(c), seeded=False)
        torch.manual_seed(c.seed)
        np.random.seed(c.seed)
        classifier = FinetuneClassifier(model.backbone, outputs, use_mean_pooling=c.use_mean_pooling,
                                        init_scale=c.init_scale, drop_path=c.drop_path, seed=c.seed,
                                        head_layers=head_layers)
        folder = self._resume_folder(model, Path(data_root))
        run = FinetuneRun(classifier, train_set, val_set, outputs, c, device, folder / "resume.pt",
                          self.recipe_identity(model, Path(data_root)))
        started = time.perf_counter()
        resumed = run.try_resume(Path(c.resume) if c.resume else None)
        self._train(run, model)
        run.final_evaluation()
        checkpoint = self._save(run, model, folder) if c.save_checkpoint and dist.is_main() else None
        return [self._result(run, model, resumed, checkpoint, time.perf_counter() - started)]

    def _check_saveable(self, model: ModelHandle) -> None:
        """A model whose fine-tuned weights could not be written fails before any work."""
        from harness.models.backbone import ViTBackbone
        from harness.models.sources.reload import reloadable_spec

        if self.cfg.save_checkpoint and not isinstance(model.backbone, ViTBackbone):
            reloadable_spec(model)

    def _head_layers(self, model: ModelHandle):
        """The pretraining projection head's first ``finetune_head_layer`` layers, read from the
        official file the model was imported from; None from the backbone."""
        from harness.models.projection_head import read_head_layers

        k = self.cfg.finetune_head_layer
        return read_head_layers(model.meta, k, model.name) if k else None

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """A uniform random guess over the train split's classes (harness.context.chance)."""
        train, _ = self.readers(Path(data_root))
        return [_chance(self.cfg, train)]

    def _resume_folder(self, model: ModelHandle, data_root: Path) -> Path:
        from harness.paths import results_dir

        return results_dir() / "runs" / "finetune" / self.recipe_identity(model, data_root)[:20]

    def _train(self, run, model: ModelHandle) -> None:
        from tqdm.auto import tqdm

        bar = tqdm(total=run.stop_step, initial=run.progress.step, unit="step", dynamic_ncols=True,
                   desc=f"finetune {model.name}", disable=not (self.cfg.progress and dist.is_main()))
        try:
            run.train(bar)
        finally:
            bar.close()

    def _save(self, run, model: ModelHandle, folder: Path) -> dict[str, str]:
        from benchmarks.finetune.checkpoint import save_finetuned

        return save_finetuned(run, model, self.cfg, folder, self.fingerprint())

    def _result(self, run, model: ModelHandle, resumed: bool, saved: dict | None, wall: float) -> ProtocolResult:
        c, p = self.cfg, run.progress
        last = run.last_eval
        history = [dict(row) for row in p.history]
        best = max(history, key=lambda r: r["top1"])
        busy = max(p.wait_s + p.train_s, 1e-9)
        params: dict[str, Any] = {
            "n_train": len(run.train_set), "n_val": len(run.val_set), "num_classes": run.classifier.head.out_features,
            "effective_batch": c.batch_size, "update_freq": c.update_freq, "world_size": run.world,
            "batch_per_device": run.micro, "steps": p.step, "steps_per_epoch": run.steps_per_epoch,
            "epochs_done": p.step / max(run.steps_per_epoch, 1), "best_epoch": best["epoch"],
            "lr": c.peak_lr(), "history": history, "resumed": resumed, "trained_on": run.trained_on(),
            "checkpoint": saved["checkpoint"] if saved else None,
            **({"checkpoint_spec": saved["spec"], "checkpoint_sha256": saved["sha256"]} if saved else {}),
            **self.train_subset_params()}
        if c.finetune_head_layer:  # the file the projection head's layers were read from
            params["head_from"] = {k: model.meta.get(k) for k in ("source_file", "source_sha256", "layout", "branch")}
        cost = {"train_s": round(p.train_s, 3), "data_wait_s": round(p.wait_s, 3), "eval_s": round(p.eval_s, 3),
                "data_wait_share": round(p.wait_s / busy, 4), "run_s": round(wall, 3)}
        # top-5 only with 5 classes or more, as the classification protocols and the chance row
        top5 = {"top5": last["top5"]} if run.classifier.head.out_features >= 5 else {}
        ema = ({"top1_ema": history[-1]["top1_ema"], "top1_ema_best": max(r["top1_ema"] for r in history)}
               if run.ema is not None else {})
        return ProtocolResult(
            metrics={"top1": last["top1"], "top1_best": best["top1"], **top5, **ema},
            dataset=c.dataset, split=c.val_split, seed=c.seed, params=params, cost=cost,
            artifacts={"checkpoint": saved["checkpoint"]} if saved else {},
            per_image=hits_block({"top1": last["hits1"], **({"top5": last["hits5"]} if top5 else {})}))


def _chance(cfg, train) -> ProtocolResult:
    from harness.context.chance import uniform_topk

    chance = uniform_topk(len(train.classes))
    return ProtocolResult(metrics={"top1_best": chance["top1"], **chance},
                          dataset=cfg.dataset, split=cfg.val_split, seed=None,
                          params={"chance": "uniform random guess", "num_classes": len(train.classes)})


def head_outputs(cfg, train) -> tuple[int, int]:
    """(the classifier's outputs, the offset added to every label): one output per class from 0, or
    the numbers the reader states for its official code (``official_num_outputs``,
    ``official_label_offset``: iBOT's CarsDataset)."""
    if cfg.head_outputs == "classes":
        return len(train.classes), 0
    outputs, offset = getattr(train, "official_num_outputs", None), getattr(train, "official_label_offset", None)
    if outputs is None or offset is None:
        raise ConfigError(f"finetune: head_outputs 'reader_official' needs a reader that states its official head "
                          f"(official_num_outputs, official_label_offset); {cfg.dataset} does not: use 'classes'")
    if len(train.classes) - 1 + offset >= outputs:
        raise DataError(f"finetune: {cfg.dataset}'s official head has {outputs} outputs, too few for labels up to "
                        f"{len(train.classes) - 1 + offset} (the official code would fail the same way)")
    return int(outputs), int(offset)


def _labels_in(train, val) -> np.ndarray:
    """The val labels in the train split's class indices (matched by class name)."""
    index = {name: i for i, name in enumerate(train.classes)}
    missing = [name for name in val.classes if name not in index]
    if missing:
        raise DataError(f"finetune: the val split has class(es) {', '.join(missing[:10])} that the train split "
                        f"lacks; a classifier trained on it can never predict them")
    remap = np.array([index[name] for name in val.classes], dtype=np.int64)
    return remap[np.asarray(val.targets, dtype=np.int64)]
