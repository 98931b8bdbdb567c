"""A model object handed to an OpenMMLab config build in-process.

mmengine builds every module from a config dict, so a model the front door already built (any
source, any weights) cannot be written into one. A protocol hands it over under a key for the
duration of the build; the registered backbone class named in the config takes it back by that key
(and deep-copies it, so that every build starts from the same weights)."""
from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn

from harness.errors import ConfigError


class Handover:
    """Modules handed over to the builds of one registered class (``owner``: the class's name in
    configs, ``where``: the module whose ``handed_over`` a caller uses, both for the error text)."""

    def __init__(self, owner: str, where: str):
        self.owner, self.where = owner, where
        self._modules: dict[str, nn.Module] = {}

    @contextlib.contextmanager
    def handed_over(self, key: str, module: nn.Module) -> Iterator[str]:
        """``module`` buildable as ``owner`` with this key while inside."""
        self._modules[key] = module
        try:
            yield key
        finally:
            self._modules.pop(key, None)

    def take(self, key: str) -> nn.Module:
        if key not in self._modules:
            raise ConfigError(f"no model was handed over under {key!r}; build {self.owner} inside "
                              f"{self.where}.handed_over(key, model)")
        return self._modules[key]
