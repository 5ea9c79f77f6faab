"""Shared test fixtures.

Compiled Stan models come from the package cache (``$STAN_DP_CACHE``; CI points it at a fresh directory so
that every run proves the toolchain builds from the package registry alone). Each program is compiled at
most once per test session and shared by all tests.

Tiers: ``make test`` runs everything; ``make test-quick`` (``pytest -m "not slow"``) leaves out the tests marked
``slow``: the statistical ones (a Monte Carlo check of a distribution: posterior moments, detailed balance,
KS, empirical privacy audits) and any test over about 10 s with a warm model cache. Every module of stan_dp
keeps at least one quick test; CI runs the full suite and prints its 25 slowest tests.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAN_MODELS = ROOT / "stan_models"
POSTERIORDB = ROOT / "data" / "posteriordb"

os.environ.setdefault("MPLBACKEND", "Agg")

_compiled: dict[str, object] = {}


def compiled_model(name: str):
    """The DPStanModel for ``stan_models/<name>.stan``, compiled once per session."""
    from stan_dp.model import DPStanModel

    if name not in _compiled:
        _compiled[name] = DPStanModel(STAN_MODELS / f"{name}.stan")
    return _compiled[name]


@pytest.fixture(scope="session")
def stan_model():
    """Factory fixture: ``stan_model("logistic")`` returns the compiled bundled program."""
    return compiled_model


@pytest.fixture(scope="session")
def posteriordb():
    """Path of the posteriordb data shipped in ``data/posteriordb`` (data sets and summaries of the reference
    posteriors; source and licence in that folder's README.md and LICENCE.md)."""
    return POSTERIORDB
