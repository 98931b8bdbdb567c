"""The generators of fixtures/ from LOST's and TokenCut's official code (run from a checkout kept
outside this repository: ``python benchmarks/discovery/reference/gen_lost_parity.py --official DIR``)."""
