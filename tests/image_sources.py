"""In-memory image sources for feature-extraction tests: the contract extract_features needs."""
import threading

import numpy as np
from PIL import Image

from harness.config import fingerprint


class RandomImages:
    """Seeded random RGB images of the given (h, w) sizes; records the threads that load them."""

    def __init__(self, sizes, seed=0):
        rng = np.random.default_rng(seed)
        self.images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
        self.threads_seen = set()

    def __len__(self):
        return len(self.images)

    def load_image(self, i):
        self.threads_seen.add(threading.get_ident())
        return self.images[i]

    def fingerprint(self):
        return fingerprint([np.asarray(im).tobytes().hex()[:64] for im in self.images])
