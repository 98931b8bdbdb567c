"""The generators of this folder's fixtures (fixtures/), run from a checkout of the official code kept
outside this repository; only the numbers they write are committed."""
