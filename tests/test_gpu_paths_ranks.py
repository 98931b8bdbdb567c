"""Sharded extraction and protocols under several ranks (gloo on the CPU): the file barriers'
timeout, a staging folder per extraction, and the protocol computed on rank 0 only."""
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

from harness.runtime import distributed as D
from harness.features import extract as features
from harness.protocol import Protocol, ProtocolResult


class _Source:
    """Four random images (picklable: rank 0 sends it to the other ranks)."""

    def __len__(self):
        return 4

    def load_image(self, i):
        from PIL import Image

        rng = np.random.default_rng(i)
        return Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8))

    def fingerprint(self):
        return "four-random-images"


def _transform():
    from harness.data.transforms import ResizeCenterCrop

    return ResizeCenterCrop(32, 32)


def test_file_barriers_wait_on_gloo_with_a_long_timeout(one_rank_group, monkeypatch):
    made = []
    real = tdist.new_group
    monkeypatch.setattr(tdist, "new_group", lambda **kw: made.append(kw) or real(**kw))
    D.file_barrier()
    D.file_barrier()
    assert len(made) == 1 and made[0]["backend"] == "gloo" and made[0]["timeout"] >= timedelta(hours=1)


def test_concurrent_extractions_of_one_key_keep_their_own_staging(one_rank_group, tmp_path, monkeypatch):
    from harness.models.handle import ModelHandle

    monkeypatch.setattr(D, "barrier", lambda: pytest.fail("a default-timeout barrier around file work"))
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    source, tf = _Source(), _transform()
    key = features.feature_key(model, source, tf, 1, True, False, "float32")
    root = tmp_path / "cache"
    other = root / f".{key}.shards" / "rank0"  # another extraction's shard, in progress
    other.mkdir(parents=True)
    args = (model, source, tf, 1, True, False, "float32", 2, 0, False, "f", "fp32", "plain", None)
    fs = features._extract_sharded(root, key, True, args)
    assert len(fs) == 4 and other.is_dir()
    assert [p.name for p in root.iterdir() if "shards" in p.name] == [f".{key}.shards"]  # ours is gone


@dataclass
class _Cfg:
    dataset: str = "four"


class _CountingProtocol(Protocol):
    """Extracts features, then writes which rank computed the number."""
    Config = _Cfg
    registry_name = "counting"
    cfg = _Cfg()

    def __init__(self, out: Path):
        self.out = out

    def fingerprint(self, extra=None):
        return "counting"

    def request_hash(self):
        return "req"

    def settings(self):
        return {}

    def precision(self):
        return "fp32"

    def run(self, model, data_root):
        fs = features.extract_features(model, _Source(), _transform(), progress=False, engine="plain")
        (self.out / f"computed_by_rank{D.rank()}").touch()
        return [ProtocolResult(metrics={"mean": float(np.asarray(fs.cls).mean())}, dataset="four", split="val")]


def _evaluate_on_rank(rank: int, world: int, tmp: str) -> None:
    from harness.running import evaluate as ev
    from harness.models.handle import ModelHandle

    os.environ["SSL_BENCH_HOME"] = str(Path(tmp) / "home")
    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"file://{tmp}/rdzv", rank=rank, world_size=world,
                             timeout=timedelta(seconds=60))
    try:
        model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
        records, _ = ev.evaluate(model, _CountingProtocol(Path(tmp)), Path(tmp), runs_dir=Path(tmp) / "runs",
                                 force=True)
        (Path(tmp) / f"mean_rank{rank}").write_text(repr(records[0]["metrics"]["mean"]))
    finally:
        tdist.destroy_process_group()


@pytest.mark.slow
def test_protocol_runs_on_rank_0_while_the_others_extract(tmp_path):
    mp.spawn(_evaluate_on_rank, args=(2, str(tmp_path)), nprocs=2, join=True)
    assert (tmp_path / "computed_by_rank0").exists() and not (tmp_path / "computed_by_rank1").exists()
    assert (tmp_path / "mean_rank0").read_text() == (tmp_path / "mean_rank1").read_text()
    [entry] = [p for p in (tmp_path / "home").rglob("meta.json")]
    import json

    assert json.loads(entry.read_text())["shards"] == 2
