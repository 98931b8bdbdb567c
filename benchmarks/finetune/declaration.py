"""What 'finetune' reports, as data (harness.declaration): read by the registry and every table
without importing the protocol. ``top1`` is the last epoch's; ``top1_best`` is the best epoch's,
the number iBOT's (BEiT's) run_class_finetuning.py prints as "Max accuracy" and the papers report;
``top1_ema`` / ``top1_ema_best`` the same of the EMA weights, with ``model_ema``."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="finetune", module="benchmarks.finetune.protocol",
        metrics=(Metric("top1", unit="%", per_image="hits", label="top-1 (last)"),
                 Metric("top1_best", unit="%", label="top-1 (best epoch)"),
                 Metric("top5", unit="%", per_image="hits", label="top-5 (last)"),
                 # with model_ema: the EMA weights' top-1, last and best epoch (SynCLR's main_finetune.py
                 # prints "Max EMA accuracy", the number SynCLR's Table 8 reports)
                 Metric("top1_ema", unit="%", label="top-1 EMA (last)"),
                 Metric("top1_ema_best", unit="%", label="top-1 EMA (best epoch)")),
        headline="top1",
        reads=("imagenet", "imagefolder", "synth_background", "cifar10", "cifar100", "inat2018", "inat2019",
               "flowers102", "cars_annos"),
        summary="end-to-end fine-tuning with a linear head, layer-wise lr decay, mixup / cutmix, "
                "RandAugment (iBOT / BEiT run_class_finetuning.py)"),
)
