"""The shard engine's full agreement sweep: every test of tests/stan/test_shard_engine.py, including the
ones it skips by default because they compile a program no other test needs (poisson_regression's poisson_log
kernel, posteriordb's wells, a valid program refused for a transformed parameter that reads the rows).

Each program takes the shard engine (or, refused, the per-row one), passes the factorization check against the
unchanged program and agrees with the per-row engine to 1e-12 relative on simulated or posteriordb data. Programs
not yet in the model cache are compiled first (about a minute each), so run it when the cores are otherwise idle:

    .venv/bin/python benchmarks/check_shard_agreement.py [extra pytest arguments]

Exit status: pytest's (0 when everything passed).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    """Run tests/stan/test_shard_engine.py with STAN_DP_SHARD_SWEEP=all and report the skips' reasons."""
    os.environ["STAN_DP_SHARD_SWEEP"] = "all"
    sys.path.insert(0, str(ROOT))
    return int(pytest.main([str(ROOT / "tests" / "test_shard_engine.py"), "-q", "-rs", "-p", "no:cacheprovider",
                            *argv]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
