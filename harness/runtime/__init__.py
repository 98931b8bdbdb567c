"""The ground floor: devices and precision, collectives, memory. Imports nothing of harness/ above
errors.py; models, training, the protocols and the runners build on it."""
