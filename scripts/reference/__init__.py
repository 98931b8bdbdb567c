"""Reference generators: run official code (a checkout outside this repository) on small inputs
and write the numbers as fixtures under tests/fixtures/<protocol>/."""
