"""The errors of training data: one home, so that ``training.data`` (the dataset-spec
dispatcher) and the loaders it dispatches to (``training.code_tasks``) both raise them without
importing each other."""


class DatasetError(ValueError):
    """Rows that cannot be used as asked; the message names the spec, row or column."""


class DatasetMissing(DatasetError):
    """The spec points at data that does not exist (yet)."""
