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


def test_protocol_cores_create_every_tensor_on_their_inputs_device():
    """The same check for the protocols' cores: k-NN's torch search and vote, the linear probe's
    batched heads, dense NN's bank, aggregation and prediction, on CPU inputs."""
    import numpy as np

    from benchmarks.classification.knn import weighted_knn
    from benchmarks.dense_nn.core import CoreSettings, aggregate, build_bank, image_labels, predict_image
    from harness.probes.linear_grid import GridSGD, LinearHeads, train_grid

    mask = np.array([[0, 0, 1, 1], [0, 1, 1, 2], [255, 255, 2, 255], [255, 255, 3, 3]], dtype=np.uint8)

    g = torch.Generator().manual_seed(0)
    train, test = torch.randn(40, 8, generator=g), torch.randn(10, 8, generator=g)
    y_train, y_test = torch.arange(40) % 3, torch.arange(10) % 3
    heads = LinearHeads(2, 8, 3)
    opt = GridSGD(heads, torch.tensor([0.1, 0.01]))
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(3)]
    s = CoreSettings(num_classes=4, ignore_index=255, patch_size=2, k=2, label_mode="soft")
    labels = [image_labels(mask, (2, 2), s) for _ in range(3)]
    with torch.device("meta"):
        knn = weighted_knn(train, y_train, test, y_test, ks=[5], backend="torch", device="cpu")
        hist = train_grid(heads, opt, lambda epoch: [(train, y_train)], test, y_test, epochs=1, steps_per_epoch=1)
        bank = build_bank(lambda i: feats[i], labels, s)
        scores = aggregate(bank, feats[0], s)
        pred = predict_image(scores, (2, 2), mask.shape, s)
    assert 0 <= knn[5]["top1"] <= 100 and len(hist.top1) == 1
    assert scores.device.type == "cpu" and pred.shape == mask.shape
