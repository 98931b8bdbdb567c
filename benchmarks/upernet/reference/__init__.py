"""The generator of fixtures/upernet_layer_decay.json from iBOT's segmentation layer-decay
constructor (run from a checkout kept outside this repository:
``python benchmarks/upernet/reference/gen_upernet_layer_decay.py --official DIR``)."""
