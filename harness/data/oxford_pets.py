"""Oxford-IIIT Pets (data set key ``pets``) in torchvision's OxfordIIITPet layout."""
from __future__ import annotations

from harness.data.official_split import OfficialSplit
from harness.registry import register_dataset


@register_dataset("pets")
class OxfordPets(OfficialSplit):
    name, SPLITS = "pets", ("trainval", "test")
    LAYOUT = ("<root>/oxford-iiit-pet/annotations/{trainval,test}.txt and <root>/oxford-iiit-pet/images/<id>.jpg "
              "(torchvision OxfordIIITPet)")

    def read(self):
        base = self.root / "oxford-iiit-pet"
        ids, labels = [], []
        for line in self.lines(base / "annotations" / f"{self.split}.txt"):
            image_id, class_id = line.split()[:2]
            ids.append(image_id)
            labels.append(int(class_id) - 1)
        breeds = dict(sorted({(lab, i.rsplit("_", 1)[0]) for i, lab in zip(ids, labels)}))
        classes = [" ".join(p.title() for p in breeds.get(k, f"class_{k}").split("_")) for k in range(max(labels) + 1)]
        return classes, [base / "images" / f"{i}.jpg" for i in ids], labels
