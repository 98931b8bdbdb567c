"""What 'finetune' reports, as data (harness.declaration): read by the registry and every table
without importing the protocol. ``top1`` is the last epoch's; ``top1_best`` is the best epoch's,
the number iBOT's (BEiT's) run_class_finetuning.py prints as "Max accuracy" and the papers report."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="finetune", module="benchmarks.finetune.protocol",
        metrics=(Metric("top1", unit="%", per_image="hits", label="top-1 (last)"),
                 Metric("top1_best", unit="%", label="top-1 (best epoch)"),
                 Metric("top5", unit="%", per_image="hits", label="top-5 (last)")),
        headline="top1",
        summary="end-to-end fine-tuning with a linear head, layer-wise lr decay, mixup / cutmix, "
                "RandAugment (iBOT / BEiT run_class_finetuning.py)"),
)
