"""SUN397 (data set key ``sun397``), partition 01, in the layout SynCLR's downstreams/sun397.py reads."""
from __future__ import annotations

from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset


@register_dataset("sun397")
class SUN397(OfficialSplit):
    """SynCLR's downstreams/sun397.py: split 01; a file's class is the first class (sorted) whose
    "/<name>/" occurs in its path."""

    name = "sun397"
    LAYOUT = "<root>/{ClassName.txt,Training_01.txt,Testing_01.txt} and <root>/<x>/<class>/<file> (SynCLR SUN397)"

    def read(self):
        classes = sorted(line[3:] for line in self.lines(self.root / "ClassName.txt"))
        listing = self.root / ("Training_01.txt" if self.split == "train" else "Testing_01.txt")
        paths, labels = [], []
        for line in self.lines(listing):
            path = self.root / line.strip()[1:]
            found = next((k for k, c in enumerate(classes) if f"/{c}/" in path.as_posix()), None)
            if found is None:
                raise DataError(f"{self.name}: {line.strip()} in {listing} names no class of ClassName.txt")
            paths.append(path)
            labels.append(found)
        return classes, paths, labels
