"""A test helper: a likelihood wrapper whose row methods raise until execution opens them.

Planning must read no row (every released number is a function of mechanism outputs and public inputs);
tests build plans on a ``RowsForbidden`` and set ``open_rows`` where execution starts."""
from __future__ import annotations

from typing import Any


class RowsForbidden:
    """Wraps a likelihood: its public shape and data-free methods pass through, its row methods raise until
    ``open_rows`` is set."""

    def __init__(self, base: Any):
        self._base = base
        self.n_rows, self.dim = base.n_rows, base.dim
        self.open_rows = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def _check(self) -> None:
        if not self.open_rows:
            raise AssertionError("a row was read before execution")

    def row_log_lik(self, theta, rows=None):
        self._check()
        return self._base.row_log_lik(theta, rows)

    def row_log_lik_grad(self, theta, rows=None):
        self._check()
        return self._base.row_log_lik_grad(theta, rows)
