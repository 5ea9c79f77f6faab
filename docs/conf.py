"""Sphinx configuration of the stan-dp documentation (``make docs`` builds it with warnings as errors).

Pages are Markdown (MyST). Three kinds of page are written at build time into ``docs/_generated/`` (git-ignored)
and included by the hand-written pages, so that they never drift from what they describe:

* ``cli.md``: the help of every ``stan-dp`` subcommand, rendered from the argument parser itself
  (``stan_dp.cli.build_parser``);
* ``api.md``: autodoc directives for every name in ``stan_dp.__all__``;
* ``benchmarks.md``: tables, text and figures from the files in ``benchmarks/results``.

Any other ``docs/*.md`` page (another contributor's topic page, the changelog) is picked up by a glob toctree on
the front page, so adding a page needs no edit here.
"""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document the source tree next to this file, not some installed copy
sys.path.insert(0, str(DOCS))

import _gen  # noqa: E402  (docs/_gen.py: the generators named above)
import stan_dp  # noqa: E402

project = "stan-dp"
author = "the stan-dp developers"
copyright = "the stan-dp developers; BSD 3-Clause licence"
release = stan_dp.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated", "README.md"]
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3
# A page added by someone else may start at "##" or skip a level; that is a style matter, not a broken build.
suppress_warnings = ["myst.header"]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "furo"
html_title = f"stan-dp {release}"
html_static_path = []
html_show_sourcelink = False
html_theme_options = {"sidebar_hide_name": False}


def _generate(app) -> None:  # noqa: ANN001 (sphinx.application.Sphinx)
    out = DOCS / "_generated"
    out.mkdir(exist_ok=True)
    _gen.write_cli_reference(out / "cli.md")
    _gen.write_api_reference(out / "api.md")
    _gen.write_benchmarks(ROOT / "benchmarks" / "results", out)
    _gen.write_auto_table(ROOT / "benchmarks" / "results", out / "auto_table.md")
    _gen.write_gallery(ROOT / "examples", out)


def setup(app) -> None:  # noqa: ANN001
    app.connect("builder-inited", _generate)
    app.connect("autodoc-process-docstring", _gen.parameter_lists)
