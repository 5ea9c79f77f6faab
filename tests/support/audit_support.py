"""A test helper shared by the audit tests: the options that keep audited iterations cheap and the marker of
the audits too long for every CI run."""
from __future__ import annotations

import os

import pytest

#: fewer leapfrog steps keep the DP-HMC iterations cheap
FAST_OPTIONS = {"dp-hmc": {"leapfrog_steps": 3}}

#: audits that take 10-20 CPU minutes each (100,000 runs per data set, whole anchored runs): too long for every
#: CI run. They run with STAN_DP_FULL_AUDIT=1; benchmarks/bench_audit.py measures the same targets and
#: benchmarks/results/audit_anchored.txt holds the figures.
FULL_AUDIT = pytest.mark.skipif(os.environ.get("STAN_DP_FULL_AUDIT") != "1",
                                reason="long audit: set STAN_DP_FULL_AUDIT=1 (figures in "
                                       "benchmarks/results/audit_anchored.txt)")
