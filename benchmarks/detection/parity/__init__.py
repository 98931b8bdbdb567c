"""The generator of the detection protocol's parity fixture (run against an official checkout)."""
