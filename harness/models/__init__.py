"""Where a model's weights come from: the backbone architectures, checkpoint loading, importers of
official checkpoints, the zoo, and the handle a protocol receives."""
