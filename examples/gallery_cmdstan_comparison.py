#!/usr/bin/env python
"""Comparing a private fit with CmdStan's: the kidiq regression against Stan CSV files.

The usual non-private run to compare with is CmdStan's own, saved as Stan CSV files (one per chain). This script
fits posteriordb's ``kidiq`` data (Gelman and Hill, 2007; as in the kidiq example: scores rescaled by the
public norms (score - 100) / 15, ``stan_models/linear_regression.stan``, ``grad_clip = 25``) privately with
``algorithm="auto"`` at epsilon 10, then compares the private draws with the Stan CSV files named by
``--cmdstan-csv`` (your CmdStan run of the same program on the same data; ``--write-data kidiq.json`` writes those
data as CmdStan's JSON data file). Without ``--cmdstan-csv`` it makes such files itself: it writes the package's
own non-private NUTS run (``model.reference``) with ``stan_dp.to_stan_csv`` and reads them back as CmdStan output
is read, so the path from Stan CSV to the comparison runs even where CmdStan is not installed. Stan CSV is read
three ways, all used here: ``stan_dp.compare`` and ``stan_dp.plot_compare`` take the file paths directly (no
extra package); ``cmdstanpy.from_csv`` reads them into a ``CmdStanMCMC`` (it needs cmdstanpy but not CmdStan
itself), which ``compare`` also takes; and ArviZ turns that into ArviZ data (``arviz_base.from_cmdstanpy`` on
ArviZ 1.x, whose ``arviz_base`` has no reader of bare CSV files; ``arviz.from_cmdstan`` reads the files on ArviZ
0.x). The three give the same comparison table. Measured in this run (the package's own NUTS as the Stan CSV
files): the private means are 1.0-1.7 posterior sds from the non-private ones (the intercept farthest), the private
posterior is 1.4-2.8 times wider, and the chains have not converged (R-hat 1.98; the package warns), so on 434
rows this run is a demonstration of the comparison path more than of an accurate private fit.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _gallery import ROOT, load


def kidiq_data() -> dict:
    """The kidiq rows on the public scale, in the program's data layout."""
    d = load("kidiq")
    x = (np.asarray(d["mom_iq"], dtype=float) - 100.0) / 15.0
    y = (np.asarray(d["kid_score"], dtype=float) - 100.0) / 15.0
    return {"N": d["N"], "K": 1, "x": x[:, None], "y": y, "prior_sd": 10.0}


def read_back(fit: Any, paths: list[Path]) -> None:
    """Read the Stan CSV files as CmdStan output is read (cmdstanpy, then ArviZ) and check that the comparison is
    the one ``stan_dp.compare`` makes from the file paths."""
    import arviz
    import stan_dp

    direct = stan_dp.compare(fit, paths).to_numpy()
    try:
        import cmdstanpy
    except ImportError:
        print("(cmdstanpy is not installed: stan_dp.compare read the files itself)")
        return
    mcmc = cmdstanpy.from_csv([str(p) for p in paths])  # reads the files; CmdStan itself is not needed
    if hasattr(arviz, "from_cmdstan"):  # ArviZ 0.x reads the files itself
        posterior = arviz.from_cmdstan([str(p) for p in paths])
    else:  # ArviZ 1.x: arviz_base converts cmdstanpy's fit (it has no reader of bare CSV files)
        from arviz_base import from_cmdstanpy

        posterior = from_cmdstanpy(mcmc)
    for label, other in (("cmdstanpy's CmdStanMCMC", mcmc), (f"ArviZ ({type(posterior).__name__})", posterior)):
        same = np.allclose(stan_dp.compare(fit, other).to_numpy(), direct)
        print(f"the files read through {label} give {'the same table' if same else 'a DIFFERENT table'}")


def main() -> None:
    parser = argparse.ArgumentParser(description="a private fit against CmdStan's Stan CSV output")
    parser.add_argument("--cmdstan-csv", nargs="+", type=Path, metavar="FILE",
                        help="CmdStan's output files of stan_models/linear_regression.stan on the kidiq data")
    parser.add_argument("--write-data", type=Path, metavar="FILE",
                        help="write the data as CmdStan's JSON data file and stop")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "figures")
    args = parser.parse_args()
    data = kidiq_data()
    if args.write_data:
        args.write_data.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in data.items()}))
        print(f"wrote {args.write_data}: run CmdStan's sample method with it, then pass the output with --cmdstan-csv")
        return

    import matplotlib

    matplotlib.use("Agg")
    import stan_dp
    from stan_dp import DPStanModel

    start = time.time()
    model = DPStanModel(stan_file=ROOT / "stan_models" / "linear_regression.stan")
    # seed: reproducible noise for a documented example; a real private run leaves it unset (see the docs)
    fit = model.sample(data, algorithm="auto", epsilon=args.epsilon, delta=1e-5, seed=1, grad_clip=25.0,
                       inits={"alpha": 0.0, "beta": [0.0], "sigma": 1.0})
    scratch = tempfile.TemporaryDirectory()
    if args.cmdstan_csv:
        paths = list(args.cmdstan_csv)
    else:
        print("no --cmdstan-csv: writing the package's own non-private NUTS run as Stan CSV in their place")
        reference = model.reference(data, seed=2)  # NOT private: for comparison only
        paths = stan_dp.to_stan_csv(reference, Path(scratch.name) / "nuts.csv")
    print(stan_dp.compare(fit, paths))
    read_back(fit, paths)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "gallery_cmdstan_comparison.png"
    stan_dp.plot_compare(fit, paths).savefig(target, dpi=80, bbox_inches="tight")
    scratch.cleanup()
    print(f"wrote {target} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
