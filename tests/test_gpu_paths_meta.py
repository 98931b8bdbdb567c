"""A CPU-side device check: one training step of every method with torch's default device set
to `meta` while the model and the batch are on the CPU. A tensor a step creates without
`device=` lands on `meta`, and the first op mixing it with the CPU's tensors raises: on a GPU
the same line would mix CPU and CUDA tensors (or move data every step)."""
import pytest
import torch

from harness.registry import METHODS
from test_gpu_paths_methods import _method


@pytest.mark.parametrize("name", ["dino", "ibot", "cribo", "synclr"])
def test_a_training_step_creates_every_tensor_on_the_models_device(name, synth_tiny):
    from harness.conformance import step_info

    assert name in METHODS.names()
    method, batch = _method(name, synth_tiny)
    with torch.device("meta"):
        losses = method.training_step(batch, step_info(0))
        losses["loss"].backward()
        method.on_step_end(step_info(0))
    assert losses["loss"].device.type == "cpu"
