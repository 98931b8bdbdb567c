import json

from harness.results import records as results
from harness.running.evaluate import evaluate
from harness.models.handle import ModelHandle
from harness.protocol import Protocol, ProtocolResult
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


class WeightSum(Counting):
    """A number that depends on the weights: two different models give two different numbers."""

    registry_name = "weight_sum"

    def run(self, model, data_root):
        w = float(sum(p.detach().double().sum() for p in model.backbone.parameters()))
        return [ProtocolResult({"w": w}, "toy", "val", seed=0, variant={"k": self.cfg.k})]


def test_each_data_root_gets_its_own_record(isolated_home):
    """The same request on two data roots: two records, each naming its own data (the second
    run used to overwrite the first one's file, so the last root won)."""
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    roots = [isolated_home / "data-a", isolated_home / "data-b"]
    for r in roots:
        r.mkdir()
        evaluate(model, Counting({"k": 3}), r)
    recs = list(results.iter_records())
    assert len(recs) == 4  # 2 seeds x 2 roots
    assert {r["protocol"]["data_root"] for r in recs} == {str(r.resolve()) for r in roots}
    # each root's run is skipped on its own records only
    for r in roots:
        done, skipped = evaluate(model, Counting({"k": 3}), r)
        assert skipped and {d["protocol"]["data_root"] for d in done} == {str(r.resolve())}


def test_init_seed_is_part_of_a_random_model_identity(isolated_home):
    """`--random-init ARCH --init-seed 5 --force`, then seed 0: seed 0 is measured, not
    served seed 5's number as "already measured"."""
    five = ModelHandle.random_init("vit_cpu_tiny", seed=5)
    zero = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    assert five.name == zero.name  # the default name says nothing about the seed
    (rec5,), _ = evaluate(five, WeightSum({"k": 3}), isolated_home, force=True)
    recs0, skipped = evaluate(zero, WeightSum({"k": 3}), isolated_home)
    assert not skipped
    assert recs0[0]["metrics"]["w"] != rec5["metrics"]["w"]
    assert rec5["model"]["init_seed"] == 5 and recs0[0]["model"]["init_seed"] == 0
    assert len(list(results.iter_records())) == 2
    (again5,), skipped = evaluate(ModelHandle.random_init("vit_cpu_tiny", seed=5), WeightSum({"k": 3}),
                                  isolated_home)
    assert skipped and again5["metrics"]["w"] == rec5["metrics"]["w"]


def test_old_records_without_the_new_fields_still_load(isolated_home):
    """A record written before the data root, weights key and init seed were in the key: it
    cannot tell which init seed it measured, so it proves nothing (the run happens), and the
    leaderboard still reads it."""
    from harness.results.leaderboard import build_leaderboard

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = Counting({"k": 3})
    old = {"id": "old", "created": "2024-01-01T00:00:00+00:00", "seed": 0, "variant": {"k": 3},
           "model": {"name": model.name, "method": "random_init", "arch": "vit_cpu_tiny",
                     "checkpoint": None, "checkpoint_sha256": None},
           "protocol": {"name": "counting", "dataset": "toy", "split": "val", "params": {},
                        "fingerprint": proto.fingerprint(), "request": proto.request_hash(),
                        "data_root": str(isolated_home)},
           "metrics": {"acc": 1.0}, "cost": {}, "artifacts": {}}
    results.runs_dir().mkdir(parents=True)
    (results.runs_dir() / "old.json").write_text(json.dumps(old))
    _, skipped = evaluate(model, proto, isolated_home)
    assert not skipped
    df = build_leaderboard(list(results.iter_records()))
    assert len(df) == 2  # the old record's row and the new one's: not averaged together


def test_cli_two_synthscenes_roots_two_records(isolated_home, synth_tiny, capsys):
    """The brief's command on two SynthScenes roots (seeds 0 and 1): one record per root."""
    from harness.cli import main
    from harness.data.synthetic import generate

    other = generate(isolated_home / "synth-seed1", preset="tiny", seed=1, progress=False)
    args = ["--threads", "1", "eval", "--protocol", "dense_nn", "--preset", "cribo", "--dataset", "voc",
            "--random-init", "vit_cpu_tiny", "--set", "train_split=train", "--set", "fractions=[1/1]",
            "--set", "seeds=[42]", "--set", "progress=false"]
    for root in (synth_tiny, other):
        assert main(args + ["--data-root", str(root)]) == 0
    recs = list(results.iter_records())
    assert len(recs) == 2
    assert {r["protocol"]["data_root"] for r in recs} == {str(synth_tiny.resolve()), str(other.resolve())}
    assert recs[0]["metrics"]["mIoU"] != recs[1]["metrics"]["mIoU"]
    assert main(args + ["--data-root", str(synth_tiny)]) == 0
    assert "already measured" in capsys.readouterr().out
