"""Error types. Every message says what was expected, what was found, and what to do."""


class SslBenchError(Exception):
    """Base class for errors that are the user's to fix (bad input, bad config)."""


class ConfigError(SslBenchError):
    """A configuration file or override is invalid."""


class RegistryError(SslBenchError):
    """Unknown or duplicate method/protocol/dataset name."""


class DataError(SslBenchError):
    """A dataset on disk is missing, incomplete or corrupt."""


class CheckpointError(SslBenchError):
    """A checkpoint cannot be read or does not fit the requested model."""


class MissingDependencyError(SslBenchError):
    """An optional dependency (e.g. mmcv with compiled ops) is not installed."""


class NotApplicable(SslBenchError):
    """A protocol cannot measure this kind of model (e.g. an mmseg protocol asked to finetune
    the raw-pixel baseline, which has no network). Suites log it and skip the pair."""


class FolderLockedError(SslBenchError):
    """Another process holds the lock on an output folder (e.g. a pretraining into the same --out)."""
