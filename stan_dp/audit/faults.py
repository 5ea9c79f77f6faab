"""Planted faults for testing the audit itself (DESIGN.md section 9): a correct implementation must give
lower bounds below the claim, and each of these must give one above it.

* ``"half-noise"``: every Gaussian privacy-noise draw has half the standard deviation the accountant assumed.
* ``"reused-noise"``: consecutive Gaussian noise draws of the same shape come in pairs sharing one standard
  normal draw (scaled by each call's sd), so two releases carry the same noise instead of independent noise.

Both patch ``stan_dp.privacy.mechanisms.gaussian_noise``, the one function through which every kernel draws
its privacy noise, for the duration of a ``with`` block. The third planted fault, DP-Fast MH's privacy-for-
free branches, is the kernel option ``privacy_for_free=True`` and needs no patch.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

from ..privacy import mechanisms

__all__ = ["FAULTS", "planted_fault"]

FAULTS = ("half-noise", "reused-noise")


@contextmanager
def planted_fault(name: str | None) -> Iterator[None]:
    """Run the block with the named fault planted in the noise of every mechanism (None: no fault)."""
    if name is None:
        yield
        return
    if name not in FAULTS:
        raise ValueError(f"unknown planted fault {name!r}; known: {', '.join(FAULTS)}")
    original = mechanisms.gaussian_noise

    if name == "half-noise":
        def faulty(rng, sd, size=None):
            return original(rng, 0.5 * float(sd), size)
    else:
        pending: dict[str, object] = {}

        def faulty(rng, sd, size=None):
            sd = float(sd)
            shape = None if size is None else tuple(np.atleast_1d(size))
            if "z" in pending and pending["shape"] == shape:
                z = pending.pop("z")
                pending.clear()
            else:
                z = original(rng, 1.0, size)
                pending.update(z=z, shape=shape)
            return sd * z

    mechanisms.gaussian_noise = faulty
    try:
        yield
    finally:
        mechanisms.gaussian_noise = original
