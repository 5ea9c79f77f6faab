"""The error a distributed row backend raises when it loses a part of the rows mid-run (an actor that died, a node
that left the cluster). Kept apart from the backend itself so that the run machinery can catch it without
importing Ray."""
from __future__ import annotations

from typing import Any

__all__ = ["BackendError", "RERUN_NOTE"]

#: said with every backend failure: what the released part costs, and what a rerun costs
RERUN_NOTE = ("Nothing beyond the draws already covered by the privacy budget was released. Running again spends a "
              "NEW budget: the privacy loss of this run and of a rerun add up.")


class BackendError(RuntimeError):
    """The row backend failed mid-run (e.g. a Ray actor died or its node left the cluster).

    ``partial_fit`` holds the draws made before the failure, with the privacy report of the budget they spent
    (None when the failure came before any draw, or outside a sampling run). The message never contains data
    values: it names the backend, the shard and what happened.
    """

    def __init__(self, message: str, *, partial_fit: Any = None):
        super().__init__(message)
        self.partial_fit = partial_fit
