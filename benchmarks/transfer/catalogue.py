"""Catalogue entries (harness.data.catalogue) of the transfer data sets, in the layouts SynCLR's
downstream loaders read (benchmarks/transfer/README.md), in the order `ssl-bench data list` shows
them; their readers are harness/data's (one module per data set). Torch-free. Sizes are the official splits';
None where SynCLR's own scripts draw the split."""
from harness.data.catalogue import DataSet, ExtraLayout, Layout, Split

_DOCS = "benchmarks/transfer/README.md, Data sets and layouts"


def _set(key: str, title: str, source: str, layout: str, splits: tuple[Split, ...], prepare=None) -> DataSet:
    return DataSet(key=key, title=title, source=source, docs=_DOCS,
                   layouts=(Layout("synclr", key, layout),), splits=splits, prepare=prepare)


def _splits(classes: int, **sizes) -> tuple[Split, ...]:
    return tuple(Split(name, size, classes=classes) for name, size in sizes.items())


CATALOGUE = (
    _set("dtd", "Describable Textures (partition 1)", "robots.ox.ac.uk/~vgg/data/dtd/: dtd-r1.0.1.tar.gz",
         "dtd/dtd/labels/{train,val,test}1.txt + dtd/dtd/images/", _splits(47, train=1_880, val=1_880, test=1_880)),
    _set("pets", "Oxford-IIIT Pets", "robots.ox.ac.uk/~vgg/data/pets/: images.tar.gz, annotations.tar.gz",
         "oxford-iiit-pet/{annotations,images}", _splits(37, trainval=3_680, test=3_669)),
    _set("flowers", "Oxford Flowers-102", "robots.ox.ac.uk/~vgg/data/flowers/102/: 102flowers.tgz, "
         "imagelabels.mat, setid.mat", "flowers-102/{imagelabels.mat,setid.mat,jpg/}",
         _splits(102, train=1_020, val=1_020, test=6_149), prepare="harness.data.prepare_flowers"),
    _set("aircraft", "FGVC-Aircraft 2013b (variants)", "robots.ox.ac.uk/~vgg/data/fgvc-aircraft/: "
         "fgvc-aircraft-2013b.tar.gz", "fgvc-aircraft-2013b/data/", _splits(100, train=3_334, val=3_333,
                                                                            trainval=6_667, test=3_333)),
    _set("cars", "Stanford Cars", "ai.stanford.edu/~jkrause/cars/car_dataset.html (cars_train, cars_test, devkit, "
         "cars_test_annos_withlabels.mat)", "stanford_cars/{cars_train,cars_test,devkit}",
         _splits(196, train=8_144, test=8_041), prepare="harness.data.prepare_cars"),
    _set("food", "Food-101", "data.vision.ee.ethz.ch/cvl/food-101.tar.gz", "food-101/{meta,images}",
         _splits(101, train=75_750, test=25_250)),
    _set("sun397", "SUN397 (partition 01)", "vision.princeton.edu/projects/2010/SUN/: SUN397.tar.gz, Partitions.zip",
         "SUN397/ with ClassName.txt, Training_01.txt, Testing_01.txt", _splits(397, train=19_850, test=19_850),
         prepare="harness.data.prepare_sun397"),
    _set("caltech101", "Caltech-101 (SynCLR's 30-per-class draw)", "data.caltech.edu/records/mzrjq-6wc02: "
         "101_ObjectCategories.tar.gz; train.txt / test.txt from SynCLR's create_caltech101_splits",
         "caltech101/101_ObjectCategories/ + train.txt, test.txt", (Split("train", None), Split("test", None)),
         prepare="harness.data.prepare_caltech101"),
    _set("eurosat", "EuroSAT (RGB)", "github.com/phelber/EuroSAT: EuroSAT.zip, split into folders as SynCLR reads it",
         "train/<class>/, test/<class>/", (Split("train", None, classes=10), Split("test", None, classes=10))),
    _set("resisc45", "NWPU-RESISC45", "gcheng-nwpu.github.io: NWPU-RESISC45.rar, split into folders as SynCLR reads it",
         "train/<class>/, test/<class>/", (Split("train", None, classes=45), Split("test", None, classes=45))),
    _set("country211", "Country211 (YFCC100M geotags)", "openaipublic.azureedge.net/clip/data/country211.tgz",
         "country211/{train,valid,test}/<code>/", _splits(211, train=31_650, valid=10_550, test=21_100)),
    _set("gtsrb", "German Traffic Sign Recognition Benchmark", "benchmark.ini.rub.de: GTSRB_Final_Training_Images.zip, "
         "GTSRB_Final_Test_Images.zip, GTSRB_Final_Test_GT.zip", "gtsrb/GTSRB/{Training,Final_Test}/ + "
         "GT-final_test.csv", _splits(43, train=26_640, test=12_630), prepare="harness.data.prepare_gtsrb"),
    _set("mnist", "MNIST", "yann.lecun.com/exdb/mnist/ (the four idx .gz files, unpacked)",
         "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte", _splits(10, train=60_000, test=10_000)),
    ExtraLayout("voc2007", Layout("classification", "voc2007", "VOCdevkit/VOC2007/ImageSets/Main/<class>_<split>.txt "
                                  "+ JPEGImages/ (SynCLR's)", docs=_DOCS,
                                  splits=_splits(20, trainval=5_011, test=4_952))),
    ExtraLayout("kitti", Layout("distance", "kitti_distance", "train/<class>/, test/<class>/ (CLIP's closest-vehicle "
                                "distance bins, 4 classes)", docs=_DOCS,
                                splits=(Split("train", None, classes=4), Split("test", None, classes=4)))),
)
