"""iNaturalist 2018 and 2019 from their official JSON annotations, labelled as iBOT's
``evaluation/eval_cls.py`` ``INatDataset`` labels them (bytedance/ibot @ da316d8; the class DeiT's
``datasets.py`` wrote, which iBOT's Table 7 runs use):

- ``<root>/train{year}.json`` / ``val{year}.json`` list the split's images; ``<root>/categories.json``
  is the un-obfuscated category list the organisers released after each competition (a list whose
  position k describes category id k, with ``name``, ``supercategory``, ``kingdom`` ... ``genus``);
- an image's category is the number in its ``file_name`` (``train_val2018/Plantae/7477/<hash>.jpg``:
  the third part), not the annotation's ``category_id``; here both must agree;
- the class of a category is its ``category`` level (``name`` by default, DeiT's ``--inat-category``),
  and classes are numbered in the order their first image appears in ``train{year}.json``'s
  ``annotations`` (not by category id), for both splits;
- the image is ``<root>/<file_name>`` with all four parts (iBOT; DeiT's own class drops the second part,
  the super-category folder, which the official archives have).
"""
from __future__ import annotations

import json

from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset

CATEGORY_LEVELS = ("kingdom", "phylum", "class", "order", "supercategory", "family", "genus", "name")


class _INaturalist(OfficialSplit):
    YEAR = 0
    SPLITS = ("train", "val")

    def __init__(self, root, split: str, category: str = "name"):
        if category not in CATEGORY_LEVELS:
            raise DataError(f"{self.name}: category level {category!r} is not one of {', '.join(CATEGORY_LEVELS)}")
        self.category = category
        super().__init__(root, split)

    @property
    def LAYOUT(self) -> str:  # noqa: N802 - the attribute OfficialSplit's messages read
        y = self.YEAR
        return (f"<root>/{{train{y}.json, val{y}.json, categories.json}} and <root>/train_val{y}/<super>/<id>/<file> "
                f"(the official archives and the released categories.json)")

    def _json(self, fname: str) -> dict | list:
        path = self.require(self.root / fname)
        try:
            return json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"{self.name}: {path} is not valid JSON ({exc}); re-extract it") from exc

    def read(self):
        categories = self._json("categories.json")
        train = self._json(f"train{self.YEAR}.json")
        data = train if self.split == "train" else self._json(f"val{self.YEAR}.json")
        level = self._levels(categories)
        class_of = {}  # category value -> class index, in order of first appearance in train annotations
        for ann in _field(train, "annotations", self, f"train{self.YEAR}.json"):
            value = level(int(ann.get("category_id", -1)), f"train{self.YEAR}.json annotation {ann.get('id')}")
            class_of.setdefault(value, len(class_of))
        annotated = {a.get("image_id"): int(a.get("category_id", -1))
                     for a in _field(data, "annotations", self, f"{self.split}{self.YEAR}.json")}
        paths, labels = [], []
        for image in _field(data, "images", self, f"{self.split}{self.YEAR}.json"):
            cat = self._category_of(image, annotated)
            value = level(cat, f"image {image['id']}")
            if value not in class_of:
                raise DataError(f"{self.name}: image {image['id']} is of {self.category} {value!r}, which no "
                                f"image of train{self.YEAR}.json has; the split files do not belong together")
            paths.append(self.root / image["file_name"])
            labels.append(class_of[value])
        return list(class_of), paths, labels

    def _levels(self, categories):
        if not isinstance(categories, list):
            raise DataError(f"{self.name}: {self.root / 'categories.json'} holds a {type(categories).__name__}; "
                            f"expected the released list of categories (position = category id)")

        def level(cat: int, where: str):
            if not 0 <= cat < len(categories):
                raise DataError(f"{self.name}: {where}: category {cat} is out of range for the {len(categories)} "
                                f"categories of categories.json")
            entry = categories[cat]
            if entry.get("id", cat) != cat or self.category not in entry:
                raise DataError(f"{self.name}: categories.json entry {cat} is {entry}; expected id {cat} with a "
                                f"{self.category!r} field (the list is read by position, as the official reader does)")
            return entry[self.category]

        return level

    def _category_of(self, image: dict, annotated: dict[int, int]) -> int:
        """The category number in the image's path, checked against its annotation."""
        parts = str(image.get("file_name", "")).split("/")
        if len(parts) != 4 or not parts[2].isdigit():
            raise DataError(f"{self.name}: image {image.get('id')} file_name {image.get('file_name')!r} is not "
                            f"train_val{self.YEAR}/<super>/<category id>/<file>; expected {self.LAYOUT}")
        if image.get("id") not in annotated:
            raise DataError(f"{self.name}: image id {image.get('id')} ({image['file_name']}) has no annotation in "
                            f"{self.split}{self.YEAR}.json")
        cat = int(parts[2])
        if annotated[image["id"]] != cat:
            raise DataError(f"{self.name}: image {image['id']} is in folder {cat} but annotated as category "
                            f"{annotated[image['id']]}; the annotation file is not the official one")
        return cat

    def fingerprint(self) -> str:
        from harness.config import fingerprint as _fingerprint

        return _fingerprint({"base": super().fingerprint(), "category": self.category})


def _field(doc, key: str, reader: _INaturalist, fname: str) -> list:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise DataError(f"{reader.name}: {reader.root / fname} has no list {key!r}; expected the official "
                        f"annotation file ({reader.LAYOUT})")
    return doc[key]


@register_dataset("inat2018")
class INaturalist2018(_INaturalist):
    name, YEAR = "inat2018", 2018


@register_dataset("inat2019")
class INaturalist2019(_INaturalist):
    name, YEAR = "inat2019", 2019
