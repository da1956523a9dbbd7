"""The dead-letter sink: every bad record, one JSONL file per source, in bounded memory.

    DeadLetterPart ─WriteParts─► part file under OUT/.tmp/dead_letter/ + PartRef
                   ─GroupBySource (PartRef only)─► AssembleSourceFiles: parts copied in file order
                                                   to OUT/dead_letter/<source>.<digest>.jsonl, renamed when complete

A reader hands its bad records on in parts of a few thousand, each written to
its own file at once (fused with the reader, so never gathered anywhere), and
only small references to them cross the GroupByKey. The files, their names and
how a source's parts are assembled are transforms/io/dead_letters.py's.
"""

from __future__ import annotations

import apache_beam as beam

from transforms.io.dead_letters import assemble, write_part

__all__ = ["WriteDeadLetters"]


class WriteDeadLetters(beam.PTransform):
    """PCollection[DeadLetterPart] -> PCollection[int] (one element: records written).

    One JSONL file per source under OUT/dead_letter/ (`dead_letter_file_name`),
    its records in file order, so the output does not depend on the runner.
    """

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir

    def expand(self, parts):
        return (parts
                | "WriteParts" >> beam.Map(write_part, self._output_dir)
                | "BySource" >> beam.Map(lambda ref: (ref.source, ref))
                | "GroupBySource" >> beam.GroupByKey()
                | "AssembleSourceFiles" >> beam.Map(assemble, self._output_dir)
                | "CountDeadLetters" >> beam.CombineGlobally(sum))
