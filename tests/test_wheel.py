"""The package as a wheel: one version, and a wheel that works outside the repository."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TINY_PROGRAM = """
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 10);
  y ~ normal(mu, 1);
}
"""

# run inside the fresh environment, from a directory outside the repository
CHECK = """
import importlib.metadata, json, sys
import numpy as np
import stan_dp
from stan_dp import DPStanModel
model = DPStanModel(stan_file=sys.argv[1])
lik = model.row_likelihood({"N": 3, "y": [0.5, -1.0, 2.0]})
value = lik.row_log_lik(np.array([0.25]), np.arange(3))
print(json.dumps({"file": stan_dp.__file__, "version": stan_dp.__version__,
                  "metadata": importlib.metadata.version("stan-dp"), "values": [float(v) for v in value]}))
"""


def test_version_is_written_once():
    """pyproject.toml reads the version from stan_dp/_version.py (no literal version), and the package reports it."""
    import stan_dp

    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert re.search(r'^version = \{ attr = "stan_dp._version.__version__" \}', pyproject, re.M)
    assert not re.search(r'^version = "', pyproject, re.M)
    written = re.search(r'__version__ = "([^"]+)"', (ROOT / "stan_dp" / "_version.py").read_text()).group(1)
    assert stan_dp.__version__ == written


def _fresh_venv(path: Path) -> Path:
    """A venv with no packages of its own that sees this environment's installed dependencies (appended to
    sys.path by a .pth file: nothing is downloaded, and the .pth files there, such as an editable install's
    finder, are not run, so the only stan_dp it can import is the one installed into it; pip is told to ignore
    the outer environment's stan-dp, which it would otherwise take as already installed)."""
    venv.create(path, with_pip=False, symlinks=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "_outer_site_packages.pth").write_text("\n".join(sorted(outer)) + "\n")
    return python


@pytest.mark.slow
@pytest.mark.stan
def test_wheel_installs_and_compiles_outside_the_repository(tmp_path):
    """`pip wheel` of the sources gives a wheel that, installed into a fresh venv outside the repository, carries
    the version of stan_dp/_version.py in its metadata, runs `stan-dp --help`, and compiles and evaluates a user's
    Stan program (the native sources and headers are package data)."""
    src = tmp_path / "src"  # a copy, so that the build writes nothing into the working tree
    shutil.copytree(ROOT / "stan_dp", src / "stan_dp", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("stan_dp-*.whl")

    python = _fresh_venv(tmp_path / "venv")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--ignore-installed", "--no-index", "-q", str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]

    work = tmp_path / "user"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    helped = subprocess.run([str(tmp_path / "venv" / "bin" / "stan-dp"), "--help"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "sample" in helped.stdout and "demo" in helped.stdout

    program = work / "tiny.stan"
    program.write_text(textwrap.dedent(TINY_PROGRAM))
    checked = subprocess.run([str(python), "-c", CHECK, str(program)], cwd=work, env=env, capture_output=True,
                             text=True, timeout=1800)
    assert checked.returncode == 0, checked.stderr[-3000:]
    result = json.loads(checked.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).resolve().is_relative_to((tmp_path / "venv").resolve())
    written = re.search(r'__version__ = "([^"]+)"', (ROOT / "stan_dp" / "_version.py").read_text()).group(1)
    assert result["version"] == result["metadata"] == written
    # l_i(mu) = -(y_i - mu)^2 / 2 + const, evaluated by the library compiled from the wheel's sources: the
    # differences between rows do not depend on which constants Stan drops
    values = result["values"]
    quadratic = [-0.5 * (y - 0.25) ** 2 for y in (0.5, -1.0, 2.0)]
    assert [v - values[0] for v in values] == pytest.approx([q - quadratic[0] for q in quadratic], abs=1e-10)
