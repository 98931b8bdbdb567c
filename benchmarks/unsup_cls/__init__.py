"""Unsupervised classification (iBOT Table 5, bytedance/ibot evaluation/unsupervised/unsup_cls.py):
cluster the evaluation images (the argmax of the model's projection head, or k-means on frozen
features) and score the clusters against the labels with ACC (Hungarian matching), ARI, NMI and FMI."""
