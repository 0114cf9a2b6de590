"""The lab's one user-facing error and its kinds, below every other module (lab.common and
lab.outputs both raise them): a LabError is the user's to fix, and the CLI prints it on one line."""
from __future__ import annotations


class LabError(Exception):
    """A problem with the user's input: the CLI prints it on one line and exits with code 2."""


class DataNotFound(LabError):
    """A dataset split that is neither local nor loadable from the hub (offline, no network,
    no `datasets` package): callers that can do without it (CONCODE's train split) catch this."""
