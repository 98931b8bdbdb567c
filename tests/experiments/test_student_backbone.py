"""experiments/student_backbone.py: a run's student backbone as an evaluable checkpoint."""
import copy

import pytest
import torch

from experiments.student_backbone import student_checkpoint
from harness.models.checkpoints import load_checkpoint
from harness.training.engine import Trainer, load_pretrain_config
from harness.errors import CheckpointError
from tiny_recipes import TINY_DINO


def test_student_checkpoint_holds_the_students_weights_not_the_teachers(synth_tiny, tmp_path):
    raw = copy.deepcopy(TINY_DINO)
    raw["train"]["epochs"] = 1
    raw["data"] = {"root": str(synth_tiny)}
    trainer = Trainer(load_pretrain_config(raw, "tiny"), tmp_path / "run", "tiny", progress=False)
    trainer.train()
    student = trainer.method.student.backbone.backbone_state_dict()
    teacher = trainer.method.teacher.backbone.backbone_state_dict()
    assert any(not torch.equal(student[k], teacher[k]) for k in student)  # the EMA lags

    path = student_checkpoint(tmp_path / "run", tmp_path / "student")
    weights, meta = load_checkpoint(path)
    assert set(weights) == set(student)
    assert all(torch.equal(weights[k], student[k]) for k in student)
    assert meta["weights"] == "student" and meta["steps"] == trainer.step
    assert meta["arch_kwargs"] == trainer.method.teacher.backbone.arch_kwargs


def test_student_checkpoint_needs_a_finished_run(tmp_path):
    with pytest.raises(CheckpointError, match="resume.pt not found"):
        student_checkpoint(tmp_path, tmp_path / "out")
