"""Features of a model on a set of images, below the protocols: the contract (contract.py),
the extraction (extract.py) and its content-addressed cache (cache.py)."""
