"""Catalogue entries (harness.data.catalogue) of the data sets this folder's readers read. Torch-free."""
from harness.data.catalogue import DataSet, Layout, Split

CATALOGUE = (
    DataSet(
        key="nyu", title="NYU Depth v2",
        source="cs.nyu.edu/~silberman/datasets/nyu_depth_v2.html (raw scenes and nyu_depth_v2_labeled.mat, "
               "splits.mat); the BTS / Monocular-Depth-Estimation-Toolbox export with nyu_train.txt / nyu_test.txt",
        docs="docs/protocols/depth.md; benchmarks/depth/reader.py", prepare="benchmarks.depth.prepare_nyu",
        layouts=(Layout("dinov3", "nyu", "root/nyu_{train,test}.txt ('<rgb> <depth> <focal>'), depth 16-bit PNG in mm",
                        splits=(Split("train", None, note="the export's train list"),
                                Split("test", 654, note="Eigen test"))),)),
    DataSet(
        key="kitti", title="KITTI (raw drives, Eigen split)",
        source="cvlibs.net/datasets/kitti/raw_data.php (raw drives) + data_depth_annotated.zip; "
               "Monocular-Depth-Estimation-Toolbox's kitti_eigen_{train,test}.txt",
        docs="docs/protocols/depth.md; benchmarks/depth/reader_kitti.py",
        layouts=(Layout("eigen_depth", "kitti", "root/kitti_eigen_{train,test}.txt, input/ and gt_depth/",
                        splits=(Split("train", None, note="the toolbox's Eigen train list"),
                                Split("test", 652, note="Eigen test: 697 lines, 652 with LiDAR depth"))),)),
)
