import json

from harness import results
from harness.evaluate import evaluate
from harness.models import ModelHandle
from benchmarks.base import Protocol, ProtocolResult
from dataclasses import dataclass


@dataclass
class CountingConfig:
    dataset: str = "toy"
    k: int = 3


class Counting(Protocol):
    """A protocol that counts its runs: proves skip-if-done without a real evaluation."""

    Config = CountingConfig
    registry_name = "counting"
    calls = 0

    def run(self, model, data_root):
        Counting.calls += 1
        return [ProtocolResult({"acc": 50.0 + s}, "toy", "val", seed=s, variant={"k": self.cfg.k})
                for s in (0, 1)]


def test_records_schema_atomic_and_skip_if_done(isolated_home):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = Counting({"k": 3})
    recs, skipped = evaluate(model, proto, isolated_home)
    assert not skipped and len(recs) == 2 and Counting.calls == 1
    files = sorted((isolated_home / "results" / "runs").glob("*.json"))
    assert len(files) == 2 and not list(files[0].parent.glob(".*tmp"))
    rec = json.loads(files[0].read_text())
    for key in ("id", "created", "model", "protocol", "seed", "metrics", "cost", "provenance"):
        assert key in rec
    assert rec["protocol"]["fingerprint"] == proto.fingerprint()
    assert {"wall_s", "peak_rss_mb", "device"} <= set(rec["cost"])
    assert {"git_commit", "torch", "timm", "python", "harness_version"} <= set(rec["provenance"])
    # same model + same fingerprint: skipped; another setting: runs again
    _, skipped = evaluate(model, proto, isolated_home)
    assert skipped and Counting.calls == 1
    _, skipped = evaluate(model, Counting({"k": 5}), isolated_home)
    assert not skipped and Counting.calls == 2
    # forced: runs again, records replaced rather than duplicated
    evaluate(model, proto, isolated_home, force=True)
    assert Counting.calls == 3 and len(list(results.iter_records())) == 4
    # the same request on another data root is not "done"
    other_root = isolated_home / "other-data"
    other_root.mkdir()
    _, skipped = evaluate(model, proto, other_root)
    assert not skipped and Counting.calls == 4


def test_write_record_never_overwrites_unless_forced(isolated_home):
    rec = {"id": "abc", "metrics": {"x": 1}}
    assert results.write_record(rec) is not None
    assert results.write_record({"id": "abc", "metrics": {"x": 2}}) is None
    assert next(results.iter_records())["metrics"] == {"x": 1}
