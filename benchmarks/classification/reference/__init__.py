"""The generators of this folder's golden fixtures (fixtures/), each run as a script on a checkout of the
official code kept outside this repository (tests/reference/README.md), and what they share with its tests."""
