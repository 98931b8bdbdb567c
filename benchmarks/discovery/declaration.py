"""What 'lost' and 'tokencut' report, as data (harness.declaration): read by the registry and every table
without importing the protocol."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="lost", module="benchmarks.discovery.protocol",
        metrics=(Metric("corloc", unit="%", direction="higher", per_image="hits", label="CorLoc"),),
        headline="corloc",
        reads=("voc07", "voc12", "coco20k"),
        synthetic="benchmarks.discovery.synthetic",
        summary="unsupervised object discovery with LOST (last-block keys, seed expansion), CorLoc"),
    ProtocolDeclaration(
        name="tokencut", module="benchmarks.discovery.protocol",
        metrics=(Metric("corloc", unit="%", direction="higher", per_image="hits", label="CorLoc"),),
        headline="corloc", synthetic="benchmarks.discovery.synthetic", reads=("voc07", "voc12", "coco20k"),
        summary="unsupervised object discovery with TokenCut (normalized cut of the last-block keys), CorLoc"),
)
