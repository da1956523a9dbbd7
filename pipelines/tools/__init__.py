"""`create_hdf5_dataset verify|inspect|report OUT ...`: trust the output, look into it, see it.

    create_hdf5_dataset verify OUT [--vocab_size V] [--max_seq_length L]
    create_hdf5_dataset inspect OUT [--file F] [--row N] [--ids] [--tokenizer_type T ...]
    create_hdf5_dataset report OUT [--output PATH]

One module per tool, each with its flags: `verify`, `inspect_rows` (the
`inspect` tool; named so as not to read as the standard library's module),
`report` (the HTML page and its plots); `common` holds what they share and
`cli` dispatches (`python -m pipelines.tools ...` works too). Also a library:
`verify_dataset`, `inspect_row`, `build_report`. The checks themselves are pure
(`transforms.core.verify`); file access goes through `transforms.io.dataset`.
"""

from pipelines.tools.cli import main
from pipelines.tools.inspect_rows import inspect_row, render_row
from pipelines.tools.report import build_report, write_report
from pipelines.tools.verify import VerifyResult, verify_dataset

__all__ = ["main", "verify_dataset", "VerifyResult", "inspect_row", "build_report", "write_report", "render_row"]
