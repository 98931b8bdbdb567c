"""Regenerate tests/fixtures/dino_head.json from the official DINO code.

Runs facebookresearch/dino vision_transformer.DINOHead unmodified (BatchNorm, train mode) with
deterministic parameters: each state-dict entry, in sorted-name order, drawn after
torch.manual_seed(1) the way tests/test_methods_shared.py::_fill_head draws ours.
"""
from __future__ import annotations

import common

REPOSITORY = "https://github.com/facebookresearch/dino"
COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
FIXTURE = "dino_head.json"
HEAD = dict(in_dim=8, out_dim=16, use_bn=True, norm_last_layer=False, nlayers=3, hidden_dim=12, bottleneck_dim=6)
PARAM_SEED, INPUT_SEED, BATCH = 1, 2, 5


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import torch

    from test_methods_shared import _fill_head

    vit = common.import_official(args.official, "vision_transformer")
    head = vit.DINOHead(**HEAD)
    _fill_head(head)  # torch.manual_seed(1), sorted state-dict names
    head.train()
    torch.manual_seed(INPUT_SEED)
    y = head(torch.randn(BATCH, HEAD["in_dim"])).detach()  # autograd on, as in training
    how = (f"facebookresearch/dino@{args.commit} vision_transformer.DINOHead("
           + ", ".join(f"{k}={v}" for k, v in HEAD.items())
           + ") in train mode; parameters overwritten in state_dict order (sorted by name) with "
             "torch.manual_seed(1); p = randn(shape) * 0.5 (weight_g = 1 + 0.1 * randn; running_var = 1, "
             "running_mean = 0, num_batches_tracked kept; tests/test_methods_shared.py _fill_head); input "
             "torch.manual_seed(2); x = randn(5, 8). Output (5, 16) and the BN running means after one forward.")
    data = {
        "provenance": common.provenance(
            args, __file__, {"DINOHead": HEAD, "param_seed": PARAM_SEED, "input_seed": INPUT_SEED, "batch": BATCH,
                             "fill": "tests/test_methods_shared.py::_fill_head"},
            ["vision_transformer.py", "utils.py"]),
        "how": how,
        "state_dict_keys": sorted(head.state_dict()),
        "output": y.tolist(),
        "running_mean_1": head.mlp[1].running_mean.tolist(),
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
