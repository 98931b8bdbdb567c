"""Catalogue entries (harness.data.catalogue) of SPair-71k and NAVI. Torch-free."""
from harness.data.catalogue import DataSet, Layout, Split

CATALOGUE = (
    DataSet(
        key="spair71k", title="SPair-71k (semantic keypoint pairs, 18 categories)",
        source="cvlab.postech.ac.kr/research/SPair-71k/: SPair-71k.tar.gz",
        docs="benchmarks/correspondence/README.md, Data",
        layouts=(Layout("published", "spair71k",
                         "PairAnnotation/<trn|val|test>/*.json, ImageAnnotation/, JPEGImages/"),),
        splits=(Split("train", 53_340, "pairs", 18), Split("valid", 5_384, "pairs", 18),
                Split("test", 12_234, "pairs", 18))),
    DataSet(
        key="navi", title="NAVI (object-centric views with aligned 3D shapes)",
        source="github.com/google/navi: navi_v1 archive, downsampled by Probe3D's data_processing/resize_navi.py",
        docs="benchmarks/correspondence/README.md, Data (NAVI)",
        layouts=(Layout("pairs", "navi", "root/<object>/<collection>/{annotations.json,images/,depth/}"),),
        splits=(Split("test", None, "pairs", note="every wild_set view, paired under 120 degrees, every 4th"),)),
)
