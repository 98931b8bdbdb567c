"""Regenerate tests/fixtures/ibot_head.json from the official iBOT code.

Runs bytedance/ibot models.head.iBOTHead unmodified in train mode (shared head with BatchNorm;
unshared without norm) with deterministic parameters: tests/test_ibot.py::_fill draws every
parameter and buffer (deduplicated, sorted by name) after torch.manual_seed(1).
"""
from __future__ import annotations

import common

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "ibot_head.json"
HEAD = dict(in_dim=8, out_dim=16, act="gelu", nlayers=3, hidden_dim=12, bottleneck_dim=6, norm_last_layer=False)
CASES = [dict(norm="bn", shared_head=True, patch_out_dim=16), dict(norm=None, shared_head=False, patch_out_dim=10)]
INPUT_SEED, BATCH, TOKENS = 2, 5, 4


def run_case(head_mod, case: dict) -> dict:
    import torch

    from test_ibot import _fill

    kw = dict(HEAD)
    head = head_mod.iBOTHead(kw.pop("in_dim"), kw.pop("out_dim"), patch_out_dim=case["patch_out_dim"],
                             norm=case["norm"], shared_head=case["shared_head"], **kw)
    names = _fill(head)  # torch.manual_seed(1)
    head.train()
    torch.manual_seed(INPUT_SEED)
    # autograd on, as in training (under no_grad the last digit of some outputs differs)
    x1, x2 = head(torch.randn(BATCH, TOKENS, HEAD["in_dim"]))
    return {**case, "names": names, "state_dict_keys": sorted(head.state_dict()), "x1": x1.detach().tolist(),
            "x2": x2.detach().tolist()}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    head_mod = common.import_official(args.official, "models.head")
    how = (f"bytedance/ibot@{args.commit} models.head.iBOTHead(in_dim=8, out_dim=16, patch_out_dim=P, norm=N, "
           "act='gelu', nlayers=3, hidden_dim=12, bottleneck_dim=6, norm_last_layer=False, shared_head=S) in train "
           "mode; parameters and buffers (deduplicated named_parameters + named_buffers, sorted by name) "
           "overwritten with torch.manual_seed(1): weight_g = 1 + 0.1*randn, running_var = 1, running_mean = 0, "
           "num_batches_tracked kept, other = randn*0.5 (tests/test_ibot.py _fill); input torch.manual_seed(2); "
           "x = randn(5, 4, 8) (CLS + 3 patch tokens); outputs (x1 (5,16), x2 (5,3,P)).")
    data = {
        "provenance": common.provenance(
            args, __file__, {"iBOTHead": HEAD, "cases": CASES, "input_seed": INPUT_SEED, "batch": BATCH,
                             "tokens": TOKENS, "fill": "tests/test_ibot.py::_fill (torch.manual_seed(1))"},
            ["models/head.py", "utils.py"]),
        "how": how,
        "cases": [run_case(head_mod, c) for c in CASES],
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
