"""The command line: `create_hdf5_dataset` (flags, YAML, Beam options) and the tools on its output.

Before anything here imports Apache Beam, a notice Beam logs on import when
the `gcp` extra is not installed is filtered out (`beam_notices`).
"""

from pipelines.beam_notices import drop_apitools_notice

drop_apitools_notice()
