"""Catalogue entries (harness.data.catalogue) of the shifted ImageNet sets with layouts of their own, in the
order `ssl-bench data list` shows them; their readers are harness.data.imagenet_shifts. Torch-free."""
from harness.data.catalogue import DataSet, Layout, Split

CATALOGUE = (
    DataSet(
        key="imagenet_v2", title="ImageNetV2 (matched frequency, threshold 0.7, top images)",
        source="github.com/modestyachts/ImageNetV2: imagenetv2-*.tar.gz (huggingface vaishaal/ImageNetV2)",
        docs="benchmarks/robustness/README.md",
        layouts=(Layout("released", "imagenet_v2", "<root>/<class index 0..999>/*.jpeg"),),
        splits=(Split("test", 10_000, classes=1000, reader_split=""),)),
    DataSet(
        key="imagenet_c", title="ImageNet-C (15 corruptions x 5 severities of ImageNet val)",
        source="zenodo.org/record/2235448 (Hendrycks & Dietterich): blur.tar, digital.tar, noise.tar, weather.tar",
        docs="benchmarks/robustness/README.md",
        layouts=(Layout("released", "imagenet_c", "<root>/<corruption>/<severity>/<wnid>/*.JPEG"),),
        splits=(Split("gaussian_noise/1", 50_000, classes=1000, note="each of the 75 corruption/severity folders"),)),
    DataSet(
        key="backgrounds_challenge", title="ImageNet-9 backgrounds challenge",
        source="github.com/MadryLab/backgrounds_challenge: backgrounds_challenge_data.tar.gz",
        docs="benchmarks/robustness/README.md",
        layouts=(Layout("released", "backgrounds_challenge", "<root>/<variation>/val/<class>/*.JPEG"),),
        splits=(Split("original", 4_050, classes=9, note="each variation (mixed_rand, only_fg, ...)"),)),
)
