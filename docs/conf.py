"""Sphinx configuration: MyST Markdown pages, the Furo theme, Mermaid diagrams, and the settings reference
generated from pipelines/settings.py (docs/_ext/settings_reference.py).

`make docs` builds with -W --keep-going -n: a broken link, a page in no table of contents, a missing
anchor or a setting the reference cannot describe is an error, not a warning.
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)  # the reference reads the settings table from the code itself
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

project = "create_hdf5_dataset"
author = "the create_hdf5_dataset authors"
extensions = ["myst_parser", "sphinxcontrib.mermaid", "settings_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings get anchors down to ####, so `[x](page.md#a-heading)` is checked like any cross-reference.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# ```mermaid fences are diagrams, drawn by mermaid.js in the browser from their text.
myst_fence_as_directive = ["mermaid"]

html_theme = "furo"
html_title = "create_hdf5_dataset"
html_static_path = []
