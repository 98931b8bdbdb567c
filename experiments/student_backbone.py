"""The student backbone of a pretraining run, as a checkpoint the protocols can evaluate.

    python -m experiments.student_backbone RUN_DIR OUT_DIR

RUN_DIR is the output of `ssl-bench pretrain` (or a suite's checkpoint folder): its
``resume.pt`` holds the whole method, its ``backbone.safetensors`` the EMA teacher that
evaluation uses. OUT_DIR/backbone.safetensors gets the student's backbone, with the
teacher's metadata and ``"weights": "student"`` (so its fingerprint differs), ready for
`ssl-bench eval --checkpoint OUT_DIR/backbone.safetensors ...`. On short schedules the
teacher still carries much of its random init; this shows what the gradients learned.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from harness.models.checkpoints import save_checkpoint
from harness.training.engine import build_method, load_pretrain_config
from harness.errors import CheckpointError

# Written by save_checkpoint itself: never copied from the teacher's record.
_INTEGRITY_KEYS = ("format", "created", "patch_size", "sha256", "weights_size", "weights_mtime_ns")


def student_checkpoint(run_dir: Path, out_dir: Path) -> Path:
    resume, teacher_meta = run_dir / "resume.pt", run_dir / "backbone.json"
    for path in (resume, teacher_meta):
        if not path.is_file():
            raise CheckpointError(f"{path} not found: RUN_DIR must be a finished `ssl-bench pretrain` output")
    state = torch.load(resume, map_location="cpu", weights_only=False)
    cfg = load_pretrain_config(json.loads(state["config"]), str(resume))
    method = build_method(cfg, str(resume))
    method.load_state_dict(state["method"])
    meta = {k: v for k, v in json.loads(teacher_meta.read_text()).items() if k not in _INTEGRITY_KEYS}
    meta["steps"] = int(state["step"])
    meta["weights"] = "student"
    weights = {k: v.detach().clone() for k, v in method.student.backbone.backbone_state_dict().items()}
    return save_checkpoint(Path(out_dir) / "backbone", weights, meta)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args(argv)
    print(student_checkpoint(args.run_dir, args.out_dir))


if __name__ == "__main__":
    main()
