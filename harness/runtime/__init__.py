"""The ground floor: devices and precision, collectives, memory. Imports nothing of harness/ above
errors.py; models, training, the protocols and the runners build on it."""

# What a device option accepts (harness.runtime.device resolves it); here so that a parser can
# say so without importing torch.
DEVICE_HELP = "auto (CUDA when available), cpu, cuda or cuda:N"
