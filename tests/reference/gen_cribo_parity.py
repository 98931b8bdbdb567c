"""Regenerate tests/fixtures/cribo_parity.json from the official CrIBo code.

Runs tileb1/CrIBo's main_cribo.py (Clustering.compute_teacher_centroids /
compute_student_centroids, get_nn_centroids, CrIBoLoss) and source/models/vision_transformer.py
(DINOHead incl. forward_c, through utils.MultiCropWrapperDINO) unmodified on the CPU in a
one-process gloo group, step by step as train_one_epoch calls them (no optimiser step, no EMA:
the heads stay fixed, as in tests/test_cribo.py::run_parity), on the seeded inputs that
tests/test_cribo.py builds (parity_inputs, parity_head_state, parity_bank_init).

Every official setting comes from the official argument parser's defaults (get_args_parser),
overridden only where a scenario sets it; the resolved namespace is recorded in the provenance.

Stubbed / redirected (the code under test is unchanged):
- source.models.swin_transformer: imported by main_cribo.py, unused by a ViT run;
- torch.tensor(..., device='cuda') in CrIBoLoss (its centroid counter): created on the CPU;
- args.gpu = 'cpu' (the official code moves its masks and marginals to args.gpu);
- compute_assignments is wrapped to record the initial centroid indices it returns.

Needs einops (the official code imports it) and torchvision.
"""
from __future__ import annotations

import argparse
import types

import common

REPOSITORY = "https://github.com/tileb1/CrIBo"
COMMIT = "311f569f9783a1c1531225e287a013e471bd60f4"
FIXTURE = "cribo_parity.json"
TOLERANCE_REL = 1e-5
N_EPOCHS = 5  # teacher temperature schedules span 5 epochs in every scenario (StepInfo total_steps=5)


def cpu_torch(torch):
    """``torch`` as main_cribo.py sees it, except that ``torch.tensor(..., device='cuda')``
    lands on the CPU (CrIBoLoss's centroid counter; nothing else in the code run asks for cuda)."""
    shim = types.ModuleType("torch")
    shim.__dict__.update(torch.__dict__)

    def tensor(*a, **k):
        if str(k.get("device", "")).startswith("cuda"):
            k["device"] = "cpu"
        return torch.tensor(*a, **k)

    shim.tensor = tensor
    return shim


def official_args(mc, parser_mod, sc: dict, temps: dict) -> argparse.Namespace:
    """The official defaults, with the scenario's settings on top."""
    args = argparse.ArgumentParser(parents=[parser_mod.get_args_parser()]).parse_args([])
    over = dict(
        n_tokens=sc["k"], queue_size=sc["queue"], pos_alpha=(sc["lambda_pos"], sc["lambda_pos"]),
        out_dim=sc["out"], out_dim_c=sc["out_obj"], patch_size=8, epochs=N_EPOCHS, local_crops_number=0,
        warmup_teacher_temp=temps["warmup_teacher_temp"], teacher_temp=temps["teacher_temp"],
        warmup_teacher_temp_c=temps["warmup_teacher_temp_obj"], teacher_temp_c=temps["teacher_temp_obj"],
        warmup_teacher_temp_epochs=temps["warmup_teacher_temp_epochs"], student_temp=temps["student_temp"],
        student_temp_c=temps["student_temp_obj"], use_fp16=False,
        # set by init_distributed_mode in a real run
        gpu="cpu", world_size=1, rank=0,
    )
    for k, v in over.items():
        setattr(args, k, v)
    return args


def run_scenario(mc, vit, utils, parser_mod, name: str, s: int) -> tuple[dict, dict]:
    import torch
    import torch.nn.functional as F

    import test_cribo as T

    sc = T.SCENARIOS[name]
    args = official_args(mc, parser_mod, sc, T.TEMPS)

    class FixedTokens(torch.nn.Module):
        """The backbone: the step's tokens whatever the images, as the ViT returns them with
        which_features='last': ([CLS], last tokens, tokens)."""

        tokens = None

        def forward(self, x):
            return self.tokens[:, 0], self.tokens, self.tokens

    def network(seed: int):
        head = vit.DINOHead(sc["dim"], args.out_dim, args.out_dim_c, use_bn=args.use_bn_in_head,
                            norm_last_layer=args.norm_last_layer, nlayers=3, hidden_dim=sc["hidden"],
                            bottleneck_dim=sc["bottleneck"])
        head.load_state_dict(T.parity_head_state(sc, seed))
        return utils.MultiCropWrapperDINO(FixedTokens(), head, args.which_features)

    teacher, student = network(11 + 10 * s), network(12 + 10 * s)
    clustering = mc.Clustering(args, n_tokens=args.n_tokens, n_heads=1, sinkhorn_lambda=args.sinkhorn_lambda,
                               sinkhorn_iterations=args.sinkhorn_iterations, student_temp=args.student_temp,
                               pos_alpha=args.pos_alpha)
    loss_fn = mc.CrIBoLoss(out_dim=args.out_dim, out_dim_c=args.out_dim_c, ncrops=args.local_crops_number + 2,
                           warmup_teacher_temp=args.warmup_teacher_temp,
                           warmup_teacher_temp_c=args.warmup_teacher_temp_c, teacher_temp=args.teacher_temp,
                           teacher_temp_c=args.teacher_temp_c,
                           warmup_teacher_temp_epochs=args.warmup_teacher_temp_epochs, nepochs=args.epochs,
                           student_temp_c=args.student_temp_c, args=args)
    # the queues as train_cribo builds them, the centroid queue from the shared seeded helper
    centroids_queue = T.parity_bank_init(sc).clone()
    cls_queue = torch.zeros(2, args.queue_size, sc["dim"])  # written, never read by the losses
    cpv_queue = args.n_tokens * torch.ones(args.queue_size, dtype=torch.int)

    captured = {}
    compute_assignments = clustering.compute_assignments

    def spy(*a, **k):
        out = compute_assignments(*a, **k)
        captured["index"] = out[2]
        return out

    clustering.compute_assignments = spy

    steps = []
    for t in range(sc["steps"]):
        epoch = t
        inp = T.parity_inputs(sc, t, s)
        teacher.backbone.tokens, student.backbone.tokens = inp["teacher_tokens"], inp["student_tokens"]
        images = [torch.zeros(sc["batch"], 3, 8, 8)] * 2  # unused by FixedTokens
        # crop_pos after train_one_epoch's per-patch mean: (views, batch, xy, patches)
        crop_pos = torch.stack([inp["coords_v1"], inp["coords_v2"]]).permute(0, 1, 3, 2)
        with torch.no_grad():
            teacher_output, teacher_features, teacher_last_tokens, teacher_tokens = teacher(images)
            torch.manual_seed(T.parity_cluster_seed(t, s))  # the multinomial draw of the initial centroids
            teacher_centroids, valid_centroids, assignments, _, centroids_per_view = \
                clustering.compute_teacher_centroids(teacher_last_tokens, teacher_tokens, crop_pos, epoch,
                                                     use_hard_assignment=True)
            student_output, _, student_last_tokens, _ = student(images)
            student_centroids = clustering.compute_student_centroids(assignments, student_last_tokens,
                                                                     valid_centroids)
            nn, mask1, idx1, nn2, idx2, mask2 = mc.get_nn_centroids(
                teacher_features, teacher_centroids, centroids_per_view, centroids_queue, cls_queue, cpv_queue, args)
            teacher_centroids = teacher(torch.cat(teacher_centroids), head_only=True)
            teacher_nn_centroids = teacher(nn, head_only=True)
            teacher_nn2_centroids = teacher(nn2, head_only=True)
            student_centroids = student(torch.cat(student_centroids), head_only=True)
            center_c = loss_fn.center_c.clone()  # the centre the loss uses, before its update
            d_loss, s_loss, nn_loss = loss_fn(student_output, teacher_output, epoch, student_centroids,
                                              teacher_centroids, mask1, teacher_nn_centroids, idx1,
                                              teacher_nn2_centroids, idx2, mask2)

            # the two cross-image cross-entropies summed over consistent pairs, from the official
            # projections and centre, to check the normalisation by hand
            temp_c = loss_fn.teacher_temp_schedule_c[epoch]
            student_v1, student_v2 = (student_centroids / loss_fn.student_temp_c).chunk(2)
            q12 = F.softmax((teacher_nn_centroids[0] - center_c) / temp_c, dim=-1)
            q21 = F.softmax((teacher_nn2_centroids[1] - center_c) / temp_c, dim=-1)
            ce12 = torch.sum(-q12 * F.log_softmax(student_v2, dim=-1), dim=-1)[mask1].sum()
            ce21 = torch.sum(-q21 * F.log_softmax(student_v1, dim=-1), dim=-1)[mask2].sum()

        b = sc["batch"]
        labels = assignments[:, :, 0].argmax(-1)  # (views, batch, patches)
        rows = centroids_queue[:, :int(cpv_queue.sum())]
        steps.append({
            "epoch": epoch,
            "input_checksum": T.input_checksum(inp),
            "init_index": captured["index"].argmax(-1).tolist(),
            "labels": torch.cat([labels[0], labels[1]], dim=1).tolist(),
            "valid": valid_centroids.reshape(b, args.n_tokens).tolist(),
            "objects_per_image": centroids_per_view.tolist(),
            "cycle_v1": mask1.tolist(),
            "cycle_v2": mask2.tolist(),
            "ce12_sum": float(ce12),
            "ce21_sum": float(ce21),
            "loss_global": float(d_loss),
            "loss_obj_cv": float(s_loss),
            "loss_obj_ci": float(nn_loss),
            "center_sum": float(loss_fn.center.double().sum()),
            "center_obj_sum": float(loss_fn.center_c.double().sum()),
            "center": loss_fn.center.flatten().tolist(),
            "center_obj": loss_fn.center_c.flatten().tolist(),
            "bank_counts": cpv_queue.tolist(),
            "bank_checksums": T.bank_checksums(rows),
        })
    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(vars(args).items())}
    return {"config": dict(sc), "steps": steps}, settings


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import torch

    mc = common.import_official(args.official, "main_cribo", stubs={"source.models.swin_transformer": {}})
    mc.torch = cpu_torch(torch)
    vit = common.import_official(args.official, "source.models.vision_transformer")
    utils = common.import_official(args.official, "source.utils.utils")
    parser_mod = common.import_official(args.official, "cribo_utils.parser")
    common.init_gloo()

    import test_cribo as T

    scenarios, settings = {}, {}
    for s, name in enumerate(T.SCENARIOS):
        scenarios[name], settings[name] = run_scenario(mc, vit, utils, parser_mod, name, s)
    head = {name: {"nlayers": 3, "hidden_dim": sc["hidden"], "bottleneck_dim": sc["bottleneck"],
                   "teacher_state": f"parity_head_state(seed={11 + 10 * s})",
                   "student_state": f"parity_head_state(seed={12 + 10 * s})"}
            for s, (name, sc) in enumerate(T.SCENARIOS.items())}
    how = (f"Produced by tests/reference/gen_cribo_parity.py running the official tileb1/CrIBo code (commit "
           f"{args.commit}; main_cribo.py Clustering.compute_teacher_centroids / compute_student_centroids, "
           "get_nn_centroids, CrIBoLoss, and source/models/vision_transformer.py DINOHead incl. forward_c through "
           "source/utils/utils.py MultiCropWrapperDINO) on the CPU in a one-process gloo group, with only an "
           "unneeded import stubbed (swin_transformer), device='cuda' redirected to the CPU and "
           "compute_assignments wrapped to record the initial centroid indices it returns. Every official "
           "setting is the official parser's default except those the scenario sets (provenance.hyperparameters "
           "lists the resolved namespace of each scenario: n_tokens = K, queue_size, pos_alpha = (lambda_pos, "
           "lambda_pos), the temperatures, epochs 5, n_iter, sinkhorn_lambda, sinkhorn_iterations, update_c, "
           "normalized_matching, ...). Inputs are the seeded tensors built by tests/test_cribo.py (parity_inputs: "
           "teacher and student backbone tokens incl. [CLS] and the patch coordinates of both views; "
           "parity_head_state: teacher head seed 11 + 10 s, student head seed 12 + 10 s, s = scenario index; "
           "parity_bank_init: the initial queue, K objects per image), fed step by step with epoch = step (5 "
           "epochs, teacher temperature warm-up over 3, cross-image loss from epoch 1); no optimiser step and no "
           "EMA, so the heads stay fixed. The random initial centroids are aligned by calling "
           "torch.manual_seed(2000 + 100 s + step) before the official clustering and giving ours a "
           "torch.Generator seeded the same (both draw torch.multinomial without replacement on the CPU); "
           "init_index is the official draw. Recorded per step: input checksum, initial centroid indices, the "
           "argmax cluster of every joint token (view 1 first), the valid-cluster mask, objects per image, both "
           "cycle-consistency masks, the three losses, the centres after the step, the queue's per-image counts "
           "(newest image first) and checksums of its rows (sum, and row-index-weighted sums per view), and the "
           "sums over consistent pairs of the two cross-image cross-entropies, recomputed from the official "
           "projections and centre, to check the paper-intent normalisation by hand.")
    data = {
        "provenance": common.provenance(
            args, __file__,
            {"official_args": settings, "heads": head, "n_epochs": N_EPOCHS, "cluster_seed": "2000 + 100 s + step",
             "tolerance_rel": TOLERANCE_REL},
            ["main_cribo.py", "cribo_utils/parser.py", "source/models/vision_transformer.py",
             "source/utils/utils.py"],
            extra_modules=("einops", "torchvision"),
            notes="official_args is each scenario's whole resolved namespace. The code run reads n_tokens (K), "
                  "queue_size, pos_alpha (lambda_pos), epochs, n_iter, sinkhorn_lambda, sinkhorn_iterations, "
                  "update_c, normalized_matching, out_dim, out_dim_c, use_bn_in_head, norm_last_layer, "
                  "which_features, local_crops_number, the temperatures, gpu and world_size; the data, optimiser "
                  "and schedule settings play no part (no data loader, no optimiser step). Head weights: "
                  "tests/test_cribo.py parity_head_state; initial centroid queue: parity_bank_init; [CLS] queue "
                  "zeros (never read by the losses); centroids per queued image K."),
        "how": how,
        "official_repo": "tileb1/CrIBo",
        "official_commit": args.commit,
        "tolerance_rel": TOLERANCE_REL,
        "temps": dict(T.TEMPS),
        "scenarios": scenarios,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
