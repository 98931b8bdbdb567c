"""What DistributedDataParallel (find_unused_parameters=False) demands of a method: every
trainable parameter gets a gradient at every step, on every rank. A one-process gloo group is
enough to run torch's DDP on the CPU."""
import torch
from torch.nn.parallel import DistributedDataParallel

from harness.config import apply_overrides, load_config
from harness.conformance import TINY, _fixed_batch, step_info
from harness.training.engine import build_method, load_pretrain_config


def _method(name: str, data_root, sets=()):
    raw = apply_overrides(load_config(f"methods/{name}_cpu.yaml"), TINY + list(sets), origin="test")
    source = raw.pop("_source_")
    raw["data"] = {"root": str(data_root)}
    cfg = load_pretrain_config(raw, source)
    torch.manual_seed(0)
    method = build_method(cfg, source).train()
    return method, _fixed_batch(method, data_root, cfg.train.batch_size)


def test_ibot_without_masked_image_modelling_trains_under_ddp(synth_tiny, one_rank_group):
    """Official iBOT builds `masked_embed` only with masked image modelling on; a mask token
    that no step uses stops DDP at its second step ("Expected to have finished reduction")."""
    method, batch = _method("ibot", synth_tiny, ["method.use_masked_im_modeling=false"])
    assert method.student.backbone.mask_token is None
    model = DistributedDataParallel(method, find_unused_parameters=method.ddp_find_unused_parameters)
    opt = torch.optim.SGD([p for _, p in method.trainable_parameters()], lr=1e-3)
    for step in range(2):
        loss = model(batch, step_info(step))["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_ibot_with_masked_image_modelling_keeps_its_mask_token(synth_tiny):
    method, _ = _method("ibot", synth_tiny)
    assert method.student.backbone.mask_token is not None


def test_cribo_step_without_objects_still_reaches_the_object_head(synth_tiny):
    """A rank whose batch has no object in both views: the cross-view loss is 0 but still a
    function of the object head, so its parameters get a (zero) gradient under DDP."""
    from methods.cribo import object_cross_view_loss

    method, _ = _method("cribo", synth_tiny)
    head = method.student.head
    student_obj = method.project_objects(head, torch.zeros(0, method.student.backbone.embed_dim))
    loss = object_cross_view_loss(student_obj, torch.zeros(0, student_obj.shape[-1]), 0.1)
    assert float(loss.detach()) == 0.0
    loss.backward()
    for p in head.last_layer_c.parameters():
        assert not p.requires_grad or (p.grad is not None and not p.grad.any())


def test_synclr_step_without_masked_tokens_keeps_the_dino_head_in_the_graph(synth_tiny):
    """With masks on other ranks only, this rank still runs the teacher's Sinkhorn-Knopp (its
    all-reduces) and gives a zero iBOT loss connected to the student's DINO head."""
    from harness.runtime import distributed as D

    method, batch = _method("synclr", synth_tiny)
    batch = dict(batch, masks=torch.zeros_like(batch["masks"]), n_masked_crops=0)
    calls = []
    real = D.all_reduce_sum

    def two_ranks(t):  # the other rank masked 5 tokens
        calls.append(tuple(t.shape))
        return t.add_(5) if t.dtype == torch.long and t.numel() == 1 and not calls[1:] else real(t)

    D_sum = D.all_reduce_sum
    try:
        D.all_reduce_sum = two_ranks
        out = method.training_step(batch, step_info(0))
    finally:
        D.all_reduce_sum = D_sum
    assert len(calls) > 1  # the count, then Sinkhorn-Knopp's sums
    assert float(out["ibot"].detach()) == 0.0
    out["loss"].backward()
    assert all(p.grad is not None for p in method.student.dino_head.parameters() if p.requires_grad)
