"""Catalogue entries (harness.data.catalogue) of the data sets whose readers live in harness/data.
Torch-free. Sizes are the official releases' (the papers' and the official split files' counts)."""
from harness.data.catalogue import DataSet, ExtraLayout, Layout, Split

_VOC_SOURCE = ("host.robots.ox.ac.uk/pascal/VOC/voc2012/VOCtrainval_11-May-2012.tar; the SBD augmentation "
               "(SegmentationClassAug, 10,582 train_aug masks) as mmseg's tools/dataset_converters/voc_aug.py "
               "makes it from Hariharan et al.'s benchmark.tgz")


def _revisited(key: str, title: str, database: int) -> DataSet:
    return DataSet(
        key=key, title=title,
        source=f"cmp.felk.cvut.cz/revisitop/: the {key} jpg archive and gnd_{key}.pkl (revisitop download.py)",
        docs="benchmarks/retrieval/README.md",
        layouts=(Layout("revisitop", key, f"<root>/{key}/jpg/*.jpg + <root>/{key}/gnd_{key}.pkl"),),
        splits=(Split("query", 70, "queries"), Split("database", database)))


CATALOGUE = (
    DataSet(
        key="imagenet", title="ImageNet-1K (ILSVRC-2012)",
        source="image-net.org: ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, ILSVRC2012_devkit_t12.tar.gz "
               "(val sorted into wnid folders by the devkit's ground truth, as torchvision's ImageNet does)",
        docs="docs/DATASETS.md, Reader API, Classification",
        layouts=(Layout("imagefolder", "imagenet", "root/{train,val}/<wnid>/<image>.JPEG (torchvision ImageFolder)",
                        checks="harness.data.prepare_imagenet"),),
        splits=(Split("train", 1_281_167, classes=1000), Split("val", 50_000, classes=1000)),
        prepare="harness.data.prepare_imagenet"),
    DataSet(
        key="imagefolder", title="any ImageFolder tree (no official sizes)",
        source="any folder of class folders, e.g. ImageNet-A, ImageNet-R, ImageNet-Sketch as released",
        docs="docs/DATASETS.md, Reader API, Classification",
        layouts=(Layout("imagefolder", "imagefolder", "root/<split>/<class>/<image> (torchvision ImageFolder)",
                        splits=(Split("train", None), Split("val", None))),)),
    DataSet(
        key="synth_background", title="SynthScenes scene backgrounds (4 texture classes)",
        source="made by `ssl-bench data synth` (no official download)",
        docs="docs/DATASETS.md, Reader API, Scene backgrounds",
        layouts=(Layout("synthscenes", "synth_background", "a SynthScenes root: VOC2012/JPEGImages + scenes.jsonl"),),
        splits=(Split("train", None, classes=4), Split("val", None, classes=4)), synthetic_only=True),
    DataSet(
        key="captions", title="caption groups (multi-positive image-text groups)",
        source="a captions.jsonl with its images (SynthScenes writes one)",
        docs="docs/DATASETS.md, Reader API, Caption groups",
        layouts=(Layout("jsonl", "captions", "captions.jsonl + images/ (one group a line)"),)),
    DataSet(
        key="voc", title="Pascal VOC 2012", source=_VOC_SOURCE,
        docs="docs/DATASETS.md, Reader API, Segmentation", prepare="harness.data.prepare_voc",
        layouts=(Layout("segmentation", "voc", "VOC2012/{JPEGImages,SegmentationClass,ImageSets/Segmentation} "
                        "(palette PNG masks read as indices)",
                        splits=(Split("train", 1_464, classes=21), Split("val", 1_449, classes=21))),
                 Layout("aug", "voc12aug", "VOC2012 + SegmentationClassAug/ and trainaug.txt (mmseg's voc_aug.py)",
                        splits=(Split("trainaug", 10_582, classes=21), Split("val", 1_449, classes=21))),
                 Layout("boxes", "voc12", "VOC2012/{JPEGImages,Annotations,ImageSets/Main}",
                        docs="docs/DATASETS.md, Reader API, Detection boxes",
                        splits=(Split("trainval", 11_540, classes=20),)))),
    DataSet(
        key="voc2007", title="Pascal VOC 2007",
        source="host.robots.ox.ac.uk/pascal/VOC/voc2007/: VOCtrainval_06-Nov-2007.tar, VOCtest_06-Nov-2007.tar",
        docs="benchmarks/transfer/README.md, Data sets and layouts; docs/DATASETS.md, Detection boxes",
        layouts=(Layout("boxes", "voc07", "VOC2007/{JPEGImages,Annotations,ImageSets/Main}",
                        docs="docs/DATASETS.md, Reader API, Detection boxes",
                        splits=(Split("trainval", 5_011, classes=20),)),),
        splits=(Split("trainval", 5_011, classes=20), Split("test", 4_952, classes=20))),
    DataSet(
        key="ade20k", title="ADE20K SceneParsing (ADEChallengeData2016)",
        source="sceneparsing.csail.mit.edu: ADEChallengeData2016.zip",
        docs="docs/DATASETS.md, Reader API, Segmentation",
        layouts=(Layout("sceneparsing", "ade20k", "ADEChallengeData2016/{images,annotations}/{training,validation} "
                        "(0 = other, reduce_zero_label)"),),
        splits=(Split("training", 20_210, classes=150), Split("validation", 2_000, classes=150))),
    DataSet(
        key="pascal_context", title="Pascal Context (VOC 2010 images)",
        source="VOCtrainval_03-May-2010.tar + trainval_merged.json, converted by mmseg's "
               "tools/dataset_converters/pascal_context.py (Detail API)",
        docs="benchmarks/segmentation/README.md", prepare="harness.data.prepare_pascal_context",
        layouts=(Layout("60", "pascal_context",
                        "VOC2010/{JPEGImages,SegmentationClassContext,ImageSets/SegmentationContext}"
                        " (60 classes, background included)", checks="harness.data.prepare_pascal_context",
                        splits=(Split("train", 4_996, classes=60), Split("val", 5_104, classes=60))),
                 Layout("59", "pascal_context_59", "the same files, background ignored (reduce_zero_label)",
                        checks="harness.data.prepare_pascal_context",
                        splits=(Split("train", 4_996, classes=59), Split("val", 5_104, classes=59))))),
    DataSet(
        key="coco", title="MS-COCO (2014 / 2017 images)",
        source="cocodataset.org: train2014.zip, annotations_trainval2014.zip; train2017.zip, val2017.zip, "
               "annotations_trainval2017.zip and stuffthingmaps_trainval2017.zip (converted by mmseg's "
               "tools/dataset_converters/coco_stuff164k.py)",
        docs="benchmarks/segmentation/README.md; docs/DATASETS.md, Detection boxes; docs/DATASETS.md, COCO instances",
        layouts=(Layout("stuff164k", "coco_stuff164k", "images/{train2017,val2017} + annotations/*_labelTrainIds.png",
                        checks="harness.data.prepare_coco_stuff", prepare="harness.data.prepare_coco_stuff",
                        splits=(Split("train2017", 118_287, classes=171, reader_split="train"),
                                Split("val2017", 5_000, classes=171, reader_split="val"))),
                 Layout("coco20k", "coco20k", "train2014/ + annotations/instances_train2014.json, "
                        "restricted to LOST's list", docs="docs/DATASETS.md, Reader API, Detection boxes",
                        splits=(Split("train", 19_817, classes=80),)),
                 Layout("instances", "coco_instances", "{train2017,val2017}/ + annotations/instances_{train2017,"
                        "val2017}.json (as released; mmdet's CocoDataset reads it)",
                        docs="docs/DATASETS.md, COCO instances (detection)",
                        splits=(Split("train2017", 118_287, classes=80), Split("val2017", 5_000, classes=80))))),
    DataSet(
        key="cifar10", title="CIFAR-10",
        source="cs.toronto.edu/~kriz/cifar-10-python.tar.gz (the python pickles)",
        docs="docs/DATASETS.md, Fine-tuning transfer sets in their official files",
        layouts=(Layout("pickles", "cifar10", "cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}"),),
        splits=(Split("train", 50_000, classes=10), Split("test", 10_000, classes=10)),
        prepare="harness.data.prepare_cifar"),
    DataSet(
        key="cifar100", title="CIFAR-100 (fine labels)",
        source="cs.toronto.edu/~kriz/cifar-100-python.tar.gz (the python pickles)",
        docs="docs/DATASETS.md, Fine-tuning transfer sets in their official files",
        layouts=(Layout("pickles", "cifar100", "cifar-100-python/{train,test,meta}"),),
        splits=(Split("train", 50_000, classes=100), Split("test", 10_000, classes=100)),
        prepare="harness.data.prepare_cifar"),
    DataSet(
        key="inat2018", title="iNaturalist 2018",
        source="github.com/visipedia/inat_comp (2018): train_val2018.tar.gz, train2018.json, val2018.json, "
               "categories.json",
        docs="docs/DATASETS.md, Fine-tuning transfer sets in their official files",
        layouts=(Layout("json", "inat2018", "train_val2018/<super>/<id>/<image> + train2018.json, val2018.json, "
                        "categories.json"),),
        splits=(Split("train", 437_513, classes=8_142), Split("val", 24_426, classes=8_142)),
        prepare="harness.data.prepare_inat"),
    DataSet(
        key="inat2019", title="iNaturalist 2019",
        source="github.com/visipedia/inat_comp (2019): train_val2019.tar.gz, train2019.json, val2019.json",
        docs="docs/DATASETS.md, Fine-tuning transfer sets in their official files",
        layouts=(Layout("json", "inat2019", "train_val2019/<super>/<id>/<image> + train2019.json, val2019.json, "
                        "categories.json"),),
        splits=(Split("train", 265_213, classes=1_010), Split("val", 3_030, classes=1_010)),
        prepare="harness.data.prepare_inat"),
    # the releases iBOT's Table 7 fine-tuning reads (evaluation/eval_cls.py), layouts of the data sets that
    # the transfer protocol's readers catalogue
    ExtraLayout("flowers", Layout(
        "ibot", "flowers102", "jpg/ + imagelabels.mat + setid.mat; trainval = trnid + valid (iBOT's training set)",
        docs="docs/DATASETS.md, Fine-tuning transfer sets in their official files",
        splits=(Split("trainval", 2_040, classes=102), Split("test", 6_149, classes=102),
                Split("train", 1_020, classes=102), Split("val", 1_020, classes=102)))),
    ExtraLayout("cars", Layout(
        "annos", "cars_annos", "car_ims/ + cars_annos.mat (the all-images release)",
        docs="docs/DATASETS.md, Fine-tuning transfer sets in their official files",
        splits=(Split("train", 8_144, classes=196), Split("test", 8_041, classes=196)))),
    # the readers of harness/data that protocol folders read: retrieval, depth, Probe3D's layouts, correspondence
    _revisited("roxford5k", "revisited Oxford 5k", 4_993),
    _revisited("rparis6k", "revisited Paris 6k", 6_322),
    DataSet(
        key="copydays", title="INRIA Copydays",
        source="thoth.inrialpes.fr/~jegou/data.php.html#copydays: original, strong, jpeg and crops archives",
        docs="benchmarks/retrieval/README.md",
        layouts=(Layout("dino", "copydays", "<root>/{original,strong,jpegqual/<q>,crops/<c>}/*.jpg"),),
        splits=(Split("database", 157, note="the originals"),
                Split("query", 3_212, note="20 blocks: 157 originals, 229 strong copies, 9 JPEG qualities and "
                                           "9 crops of the 157"))),
    DataSet(
        key="nyu", title="NYU Depth v2",
        source="cs.nyu.edu/~silberman/datasets/nyu_depth_v2.html (raw scenes and nyu_depth_v2_labeled.mat, "
               "splits.mat); the BTS / Monocular-Depth-Estimation-Toolbox export with nyu_train.txt / nyu_test.txt",
        docs="benchmarks/depth/README.md; harness/data/nyu.py", prepare="harness.data.prepare_nyu",
        layouts=(Layout("dinov3", "nyu", "root/nyu_{train,test}.txt ('<rgb> <depth> <focal>'), depth 16-bit PNG in mm",
                        splits=(Split("train", None, note="the export's train list"),
                                Split("test", 654, note="Eigen test"))),)),
    DataSet(
        key="kitti", title="KITTI (raw drives, Eigen split)",
        source="cvlibs.net/datasets/kitti/raw_data.php (raw drives) + data_depth_annotated.zip; "
               "Monocular-Depth-Estimation-Toolbox's kitti_eigen_{train,test}.txt",
        docs="benchmarks/depth/README.md; harness/data/kitti.py", prepare="harness.data.prepare_kitti",
        layouts=(Layout("eigen_depth", "kitti", "root/kitti_eigen_{train,test}.txt, input/ and gt_depth/",
                        splits=(Split("train", None, note="the toolbox's Eigen train list"),
                                Split("test", 652, note="Eigen test: 697 lines, 652 with LiDAR depth"))),)),
    ExtraLayout("nyu", Layout(
        "probe3d", "nyu_probe3d",
        "nyuv2_geonet/*.mat (GeoNet export, train) + nyuv2/nyuv2_snorm_all.pkl (labelled frames)",
        docs="benchmarks/normals/README.md, Data", prepare="harness.data.prepare_nyu_probe3d",
        splits=(Split("test", 654, note="test_indices of the 1,449 labelled frames"),))),
    ExtraLayout("navi", Layout(
        "probe3d", "navi_probe3d", "root/<object>/<collection>/ with annotations.json, images/, depth/ (downsampled)",
        docs="benchmarks/normals/README.md, NAVI",
        splits=(Split("trainval", None), Split("test", None, note="every wild_set frame, every 4th")))),
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
        source="github.com/google/navi: navi_v1.tar.gz, downsampled by Probe3D's data_processing/resize_navi.py",
        docs="benchmarks/correspondence/README.md, Data (NAVI)", prepare="harness.data.prepare_navi",
        layouts=(Layout("pairs", "navi", "root/<object>/<collection>/{annotations.json,images/,depth/}"),),
        splits=(Split("test", None, "pairs", note="every wild_set view, paired under 120 degrees, every 4th"),)),
    DataSet(
        key="davis2017", title="DAVIS-2017 semi-supervised (480p)",
        source="davischallenge.org/davis2017/code.html: DAVIS-2017-trainval-480p.zip",
        docs="docs/DATASETS.md, Reader API, Video; benchmarks/davis/README.md",
        layouts=(Layout("480p", "davis2017",
                         "ImageSets/2017/<split>.txt, JPEGImages/480p/<seq>/, Annotations/480p/<seq>/", height=480),),
        splits=(Split("train", 60, "sequences"), Split("val", 30, "sequences"))),
)
