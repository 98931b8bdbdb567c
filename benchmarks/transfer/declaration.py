"""The linear-transfer protocol's declaration (harness.declaration), torch-free.

Each data set reports its published metric (SynCLR's main_downstream_linear.py ``LINEAR_DATASETS``):
top-1, mean per-class accuracy, or VOC2007's 11-point mAP; a record holds the one its data set uses."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DATASET_NAMES = ("dtd", "pets", "flowers", "aircraft", "caltech101", "voc2007", "food", "sun397", "cars",
                 "eurosat", "resisc45", "kitti_distance", "country211", "gtsrb", "mnist")

DECLARATIONS = (
    ProtocolDeclaration(
        name="transfer", module="benchmarks.transfer.protocol",
        metrics=(Metric("top1", unit="%", per_image="hits", label="top-1"),
                 Metric("mean_per_class", unit="%", per_image="class_hits", label="mean per-class acc."),
                 Metric("mAP", unit="%", per_image="voc11", label="11-point mAP")),
        headline="top1",
        reads=DATASET_NAMES,  # readers: harness/data; split plans: benchmarks.transfer.splits
        per_image_kinds={"class_hits": "benchmarks.transfer.per_image_kind",
                         "voc11": "benchmarks.transfer.per_image_kind"},
        synthetic="benchmarks.transfer.synthetic",
        summary="linear transfer (SynCLR Table 6): L-BFGS logistic regression on frozen features, "
                "C chosen on a validation split, refit on train+val"),
)
