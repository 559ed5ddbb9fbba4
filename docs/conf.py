"""Sphinx configuration of the eml_ops documentation (``make docs``).

Markdown pages (MyST), the Python API from the docstrings (autodoc), built with warnings as
errors and nitpicky references, offline: no intersphinx, so references to torch's and
Python's own objects are listed as known below instead of being looked up.
"""

from __future__ import annotations

import eml_ops

project = "eml_ops"
author = "the eml_ops authors"
copyright = "2026, the eml_ops authors"
version = release = eml_ops.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: ```{directive} blocks, $math$, and GitHub-style anchors for headings (#the-derivation),
# so the same links work on GitHub and in the built site.
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Offline build: objects of torch and the standard library cannot be resolved without
# intersphinx (which would fetch their inventories), so nitpicky mode ignores them only.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|collections|contextlib|typing|types|threading|pathlib|argparse)(\..*)?"),
    (r"py:.*", r"(Tensor|Module|Iterator|Callable|Sequence|Path|ModuleType|FunctionCtx)"),
    (r"py:class", r"(int|float|str|bool|None|object|dict|list|tuple)"),
]

html_theme = "furo"
html_title = f"eml_ops {release}"
html_static_path = ["_static"]
