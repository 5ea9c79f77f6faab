"""Planted faults for testing the audit itself: a correct implementation must give
lower bounds below the claim, and each of these must give one above it.

Every fault patches the one function of the code under test through which the faulty quantity flows, for
the duration of a ``with`` block, so that it reaches every kernel that uses that function (an audit fault that
never reaches the code under test proves nothing):

* ``"half-noise"``: every Gaussian privacy-noise draw has half the standard deviation the accountant assumed
  (``mechanisms.gaussian_noise``, through which the ratio and gradient mechanisms, the SG kernels' merged
  noise and the DP-GD warm start all draw).
* ``"reused-noise"``: consecutive Gaussian noise draws of the same shape come in pairs sharing one standard
  normal draw (scaled by each call's sd), so two releases carry the same noise instead of independent noise.
* ``"sg-sensitivity"``: the SG kernels size their privacy noise for a sensitivity of L instead of 2 L (the
  noise sd from ``mechanisms.privacy_noise_variance`` is halved), a factor-2 sensitivity error. It shows only
  where the privacy noise, not the dynamics noise, sets the injected variance (``free_steps=False``, large
  steps).
* ``"released-batch-size"``: the SG kernels release the realised Poisson minibatch size in their ``StepInfo``
  (the defect the accountant's Poisson-subsampled pair does not cover).
* ``"nan-row-ops"``: OPS's clipped log-likelihood lets a NaN row through, so the tempered density is -inf
  wherever one row fails to evaluate (one row removes part of the support).
* ``"double-clip"``: every clipped release clips at twice the bound its noise is calibrated for (half the noise
  relative to the sensitivity): the per-row L2 clip of gradients (gradient sums, the gradient differences of an
  anchored run, the squared-gradient and outer-product sums F~ of the anchor's curvature and of dp-laplace, the
  DP-GD steps) and the log-likelihood ratio clip (and the anchored remainders, DP-Fast MH's energy differences).
  Planted in ``mechanisms._clip_scale``, the one place where a gradient clip bound enters (``clip_gradients``
  and ``clipped_gradient_sum`` both scale by it), and in ``mechanisms.clip_ratios``. OPS's interval clip of
  log-likelihoods is not patched (the ``"nan-row-ops"`` fault covers that mechanism).

* ``"unit-row-clip"``: a privacy unit's rows are clipped one by one instead of as one sum (the grouping of
  ``stan_dp.privacy.units.group_rows`` is lost: every row becomes its own unit), so a unit of k rows at the bound
  moves a release by k times the bound its noise is sized for. Planted in ``group_rows``, which every
  ``UnitLikelihood`` calls once.

The DP-Fast MH privacy-for-free branches are a kernel option (``privacy_for_free=True``) and need no patch.
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from ..privacy import mechanisms, units
from ..samplers import sgmcmc

__all__ = ["FAULTS", "planted_fault"]

FAULTS = ("half-noise", "reused-noise", "sg-sensitivity", "released-batch-size", "nan-row-ops", "double-clip",
          "unit-row-clip")


@contextmanager
def _patched(owner: Any, name: str, replacement: Callable) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _half_noise() -> Callable:
    original = mechanisms.gaussian_noise

    def faulty(rng, sd, size=None):
        return original(rng, 0.5 * np.asarray(sd, dtype=float) if size is not None else 0.5 * float(sd), size)

    return faulty


def _reused_noise() -> Callable:
    original = mechanisms.gaussian_noise
    pending: dict[str, Any] = {}

    def faulty(rng, sd, size=None):
        shape = None if size is None else tuple(np.atleast_1d(size))
        if "z" in pending and pending["shape"] == shape:
            z = pending.pop("z")
            pending.clear()
        else:
            z = original(rng, 1.0, size)
            pending.update(z=z, shape=shape)
        return (float(sd) if size is None else np.asarray(sd, dtype=float)) * z

    return faulty


def _sg_sensitivity() -> Callable:
    original = mechanisms.privacy_noise_variance

    def faulty(drift_scale, sampling_rate, grad_clip, tau_g):
        return 0.25 * original(drift_scale, sampling_rate, grad_clip, tau_g)

    return faulty


def _nan_row_ops() -> Callable:
    original = mechanisms.clipped_log_likelihood_sum

    def faulty(values, grads, low, high):
        values = np.asarray(values, dtype=float)
        if np.isnan(values).any():  # the defect: a NaN row makes the whole clipped sum non-finite
            return -math.inf, np.zeros(np.asarray(grads).reshape(values.size, -1).shape[1])
        return original(values, grads, low, high)

    return faulty


@contextmanager
def _double_clip() -> Iterator[None]:
    scale, ratios = mechanisms._clip_scale, mechanisms.clip_ratios
    with _patched(mechanisms, "_clip_scale", lambda norms, b, out=None: scale(norms, 2.0 * float(b), out=out)), \
            _patched(mechanisms, "clip_ratios", lambda r, c: ratios(r, 2.0 * float(c))):
        yield


@contextmanager
def _released_batch_size() -> Iterator[None]:
    original_batch, original_info = sgmcmc._SGKernel._batch, sgmcmc._SGKernel._info

    def recording_batch(self, rng):
        batch = original_batch(self, rng)
        self._planted_batch_size = int(batch.size)
        return batch

    def leaking_info(self, *args, **kwargs):
        info = original_info(self, *args, **kwargs)
        info.extra["batch_size"] = getattr(self, "_planted_batch_size", -1)
        return info

    with _patched(sgmcmc._SGKernel, "_batch", recording_batch), \
            _patched(sgmcmc._SGKernel, "_info", leaking_info):
        yield


def _rows_as_units(labels: Any, max_rows_per_unit: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The faulty grouping: every row its own unit (the labels are ignored)."""
    n = int(np.asarray(labels).size)
    return np.arange(n, dtype=np.intp), np.arange(n, dtype=np.intp), np.ones(n, dtype=np.intp)


@contextmanager
def planted_fault(name: str | None) -> Iterator[None]:
    """Run the block with the named fault planted (None: no fault)."""
    if name is None:
        yield
        return
    if name not in FAULTS:
        raise ValueError(f"unknown planted fault {name!r}; known: {', '.join(FAULTS)}")
    with ExitStack() as stack:
        if name == "half-noise":
            stack.enter_context(_patched(mechanisms, "gaussian_noise", _half_noise()))
        elif name == "reused-noise":
            stack.enter_context(_patched(mechanisms, "gaussian_noise", _reused_noise()))
        elif name == "sg-sensitivity":
            stack.enter_context(_patched(mechanisms, "privacy_noise_variance", _sg_sensitivity()))
        elif name == "nan-row-ops":
            stack.enter_context(_patched(mechanisms, "clipped_log_likelihood_sum", _nan_row_ops()))
        elif name == "double-clip":
            stack.enter_context(_double_clip())
        elif name == "unit-row-clip":
            stack.enter_context(_patched(units, "group_rows", _rows_as_units))
        else:
            stack.enter_context(_released_batch_size())
        yield
