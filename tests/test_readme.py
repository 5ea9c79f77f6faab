"""The README's Python example runs as written (in a fresh interpreter, from the repository root)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.stan
def test_readme_python_example_runs(stan_model):
    """The first ```python block of README.md runs without error and prints a summary and the budget."""
    stan_model("logistic")  # compile once in this session's cache
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "beta[2]" in proc.stdout and "5.0 1e-06 1" in proc.stdout
