"""Catalogue entries (harness.data.catalogue) of the retrieval data sets. Torch-free."""
from harness.data.catalogue import DataSet, Layout, Split


def _revisited(key: str, title: str, database: int) -> DataSet:
    return DataSet(
        key=key, title=title,
        source=f"cmp.felk.cvut.cz/revisitop/: the {key} jpg archive and gnd_{key}.pkl (revisitop download.py)",
        docs="benchmarks/retrieval/README.md",
        layouts=(Layout("revisitop", key, f"<root>/{key}/jpg/*.jpg + <root>/{key}/gnd_{key}.pkl"),),
        splits=(Split("query", 70, "queries"), Split("database", database)))


CATALOGUE = (
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
)
