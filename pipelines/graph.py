"""The job graph: `build` wires the stages a JobPlan asks for, and nothing else.

    input manifest -> ReadCorpus -> (SkipStoredGroups, on resume)
        -> NormalizeDocuments -> TokenizeDocuments      (modes with a chat template: EncodeConversations)
           (before it, with --language_id or --languages: IdentifyLanguage; with --quality_filters:
           FilterQuality; with --decontaminate: Decontaminate)
        -> (Deduplicate) -> (after either, SkipStoredGroups here on resume) -> (SelectMixture)
        -> the mode's rows -> EncodeRows -> (StoreGroups) -> WriteHdf5Shards
        -> WriteDatasetParams (data_params.json)
    ReadCorpus's bad records -> WriteDeadLetters

A split job routes each document to its output after reading (RouteDocuments)
and ends in WriteSplitParams; the stages between take each output's settings
(PerPart), so the graph does not grow with the outputs.

Every setting comes from the plan (pipelines.plan); nothing here reads flags,
options or files.
"""


import apache_beam as beam

from pipelines.plan import JobPlan
from transforms.core.chat.batch import RecordCheck
from transforms.core.records import JsonKey, PerPart
from transforms.io import fs
from transforms.io.hooks import DOCUMENT, PREFERENCE, REGIONS, ReadHookCheck
from transforms.io.intermediate import MIXTURE_PLAN
from transforms.core.modes import CONVERSATION, TEXT
from transforms.stages.chat import EncodeConversations
from transforms.stages.dead_letters import WriteDeadLetters
from transforms.stages.decontam import DecontaminateDocuments
from transforms.stages.dedup import DeduplicateDocuments, ReadDedupIndex
from transforms.stages.hdf5_sink import EncodeRows, WriteHdf5Shards
from transforms.stages.langid import IdentifyLanguage
from transforms.stages.quality import FilterQuality
from transforms.stages.intermediate import STORED, SkipStoredGroups, StoreGroups
from transforms.stages.manifest import MergeStats, WriteDatasetParams, WriteSplitParams
from transforms.stages.mixture import SelectMixture
from transforms.stages.normalize import NormalizeDocuments
from transforms.stages.read_corpus import DEAD_LETTERS, DOCS, ReadCorpus, ReadInputManifest
from transforms.stages.rows import build_rows
from transforms.stages.splits import REST, RouteDocuments, SeparateRest
from transforms.stages.tokenize import TokenizeDocuments

__all__ = ["build", "record_check"]


def build(pipeline: beam.Pipeline, plan: JobPlan):
    """Wire the stages; returns the PCollection holding the final params dict."""
    read = (
        pipeline
        | "InputFiles" >> ReadInputManifest(plan.input_manifest)
        | "ReadCorpus" >> ReadCorpus(keys=plan.keys, join_keys=plan.join_keys, group_bytes=plan.group_bytes,
                                     max_record_bytes=plan.max_record_bytes, unit_groups=plan.unit_groups,
                                     fan_out_bytes=plan.fan_out_bytes, txt_lines=plan.txt_lines,
                                     check=record_check(plan))
    )
    docs, stored = read[DOCS], None
    if _resuming(plan) and not _across_records(plan):
        docs, stored = _skip_stored(plan, docs)
    dead_letters = read[DEAD_LETTERS] | "DeadLetters" >> WriteDeadLetters(plan.output_dir)
    if plan.splits is None:
        if plan.chat is None:
            docs = docs | "NormalizeDocuments" >> NormalizeDocuments(plan.normalize)
        docs, language = _identify_language(plan, docs, read[DEAD_LETTERS])
        docs, quality = _filter_quality(plan, docs, read[DEAD_LETTERS])
        tokens, decontam = _encode(plan, plan, docs, read[DEAD_LETTERS])
        tokens, dedup = _dedup(plan, tokens, read[DEAD_LETTERS])
        if _resuming(plan) and _across_records(plan):
            tokens, stored = _skip_stored(plan, tokens)
        mixture = None
        if plan.mixture is not None:
            tokens, mixture = tokens | "SelectMixture" >> _select_mixture(plan)
        return _write(plan, _rows(plan, tokens), stored, dead_letters, mixture,
                      {"language": language, "quality": quality, "decontamination": decontam, "dedup": dedup})
    return _build_splits(plan, docs, stored, dead_letters, read[DEAD_LETTERS])


def _across_records(plan: JobPlan) -> bool:
    """Whether a stage decides by every record (deduplication; decontamination, whose boilerplate n-grams are
    counted over the corpus) or lists what it removed (language identification, the quality filters: each
    file's listing is written whole): a resumed job then skips its stored groups after those stages."""
    return plan.dedup is not None or plan.decontam is not None or plan.langid is not None or bool(plan.quality)


def _identify_language(plan: JobPlan, docs, dead_letter_parts):
    """DocBatch (normalized, but a conversation's) -> the batches without the records not in the languages asked
    for (none removed without --languages; nothing done without it or --language_id); returns (the batches, the
    stage's summary or None)."""
    if plan.langid is None:
        return docs, None
    return docs | "IdentifyLanguage" >> IdentifyLanguage(plan.langid, _json_values(plan), plan.output_dir,
                                                         dead_letter_parts)


def _filter_quality(plan: JobPlan, docs, dead_letter_parts):
    """DocBatch (normalized, but a conversation's) -> the batches without the records a quality filter removes
    (none without --quality_filters); returns (the batches, the stage's summary or None)."""
    if not plan.quality:
        return docs, None
    return docs | "FilterQuality" >> FilterQuality(plan.quality, _json_values(plan), plan.output_dir,
                                                   dead_letter_parts)


def _json_values(plan: JobPlan) -> tuple:
    """Per value of a record, whether the job reads it as JSON (a conversation, a preference pair's side)."""
    return tuple(isinstance(k, JsonKey) for k in plan.keys)


def _resuming(plan: JobPlan) -> bool:
    # A mixture resumes from the plan its interrupted run kept; without one, no group was selected (and so none
    # stored) before it stopped.
    return bool(plan.storage_dir and plan.resume and (plan.mixture is None or plan.mixture_plan is not None))


def _skip_stored(plan: JobPlan, batches):
    """(the batches still to process, the stored groups' blocks) of a resumed job."""
    copies = None
    if plan.mixture is not None:
        copies = (*(plan.mixture_plan.groups_of(k) for k in plan.mixture_sources), len(plan.files))
    skipped = batches | "SkipStoredGroups" >> SkipStoredGroups(plan.storage_dir, plan.splits, copies)
    return skipped.todo, skipped[STORED]


def _encode(plan: JobPlan, keyed: JobPlan, docs, dead_letter_parts):
    """DocBatch (normalized, but a conversation's) -> TokenBatch (the text modes) or EncodedBatch (modes with a
    chat template), without the records that hold evaluation text (none removed without --decontaminate);
    returns (the batches, the decontamination's summary or None). `keyed`: the plan whose settings are each
    output's (a split job's by_part)."""
    decontam = None
    if plan.decontam is not None:
        docs, decontam = docs | "Decontaminate" >> DecontaminateDocuments(
            plan.decontam, plan.decontam_files, plan.decontam_sets, plan.decontam_keys, _json_values(plan),
            plan.output_dir, dead_letter_parts,
            storage_dir=fs.join(plan.storage_dir, "decontaminate") if plan.storage_dir else None,
            process_cpus=plan.process_cpus)
    if plan.chat is not None:
        return docs | "EncodeConversations" >> _encode_conversations(keyed), decontam
    return docs | "TokenizeDocuments" >> _tokenize(plan), decontam


def _dedup(plan: JobPlan, tokens, dead_letter_parts):
    """Duplicates removed from the tokenized records, before a mixture's draw and the rows (none without
    --dedup); returns (the records, the stage's summary or None)."""
    if plan.dedup is None:
        return tokens, None
    earlier = None
    if plan.dedup_against is not None:
        earlier = tokens.pipeline | "ReadDedupIndex" >> ReadDedupIndex(plan.dedup_against_parts)
    return tokens | "Deduplicate" >> DeduplicateDocuments(
        plan.dedup, plan.output_dir, dead_letter_parts, plan.tokenizer_files,
        first_only=plan.traits.record == CONVERSATION,
        earlier=earlier, against=plan.dedup_against, index_dir=plan.dedup_index, index_meta=plan.dedup_index_meta,
        storage_dir=fs.join(plan.storage_dir, "dedup") if plan.storage_dir else None)


def _select_mixture(plan: JobPlan) -> SelectMixture:
    """The mixture's stage: its plan kept beside the stored groups (a resumable job), or the kept one used."""
    keep = fs.join(plan.output_dir, fs.TMP_DIR, MIXTURE_PLAN) if plan.storage_dir else None
    return SelectMixture(plan.mixture, plan.mixture_sources, len(plan.files), keep_plan=keep,
                         plan=plan.mixture_plan, encoded=plan.chat is not None,
                         storage_dir=fs.join(plan.storage_dir, "mixture") if plan.storage_dir else None)


def record_check(plan: JobPlan):
    """What the reader asks of each record it parsed: a read hook's regions, a chat's well-formedness, nothing."""
    if plan.region_defaults is not None:  # a record is what the hook's regions make of it, for the mode at hand
        output = DOCUMENT if plan.chat is None else PREFERENCE if plan.chat.dpo else REGIONS
        return ReadHookCheck(plan.hook, dict(plan.hook_kwargs), tuple(map(str, plan.keys)), plan.region_defaults,
                             output=output)
    return RecordCheck(plan.chat) if plan.chat else None


def _build_splits(plan: JobPlan, docs, stored, dead_letters, dead_letter_parts):
    """Each document routed to one output; the outputs written by one set of transforms, each stage taking
    its settings for the output at hand (PerPart); every output's data_params.json, then the summary.

    Documents are read, normalized and tokenized once. The graph does not grow with the outputs.
    """
    splits = plan.splits
    outputs = [plan.for_output(k) for k in range(len(splits.outputs))]
    keyed = plan.by_part()

    def per_part(get):
        return PerPart(tuple(get(o) for o in outputs))

    routed = docs | "RouteDocuments" >> RouteDocuments(splits, plan.normalize if plan.chat is None else None)
    parts, rest = routed.parts, routed[REST]
    # Across the outputs: a document's near copies and its evaluation n-grams are found wherever the routing sent
    # it, and the routing is a function of each document alone, so this is removing them before the split.
    parts, language = _identify_language(plan, parts, dead_letter_parts)
    parts, quality = _filter_quality(plan, parts, dead_letter_parts)
    tokens, decontam = _encode(plan, keyed, parts, dead_letter_parts)
    mixture = None
    tokens, dedup = _dedup(plan, tokens, dead_letter_parts)
    if _resuming(plan) and _across_records(plan):  # each output's share is skipped when it is stored
        tokens, stored = _skip_stored(plan, tokens)
    if plan.mixture is not None:
        # After the routing: a document's copies are drawn with it, so they are all in its output.
        tokens, mixture = tokens | "SelectMixture" >> _select_mixture(plan)
    rows = _rows(keyed, tokens)
    if plan.storage_dir:
        rest = rest | "StoreRest" >> StoreGroups(plan.storage_dir)
    if stored is not None:
        stored = stored | "SeparateStoredRest" >> SeparateRest(splits)
        rest = (rest, stored["rest"]) | "WithStoredRest" >> beam.Flatten()
        stored = stored["outputs"]
    rest_stats = (rest | "RestStats" >> beam.Map(lambda b: b.stats)
                  | "MergeRestStats" >> beam.CombineGlobally(MergeStats()))
    blocks, shards = _write_shards(plan, rows, stored, row_format=per_part(lambda p: p.row_format),
                                   output_dir=per_part(lambda p: p.output_dir))
    stats = (blocks | "Stats" >> beam.Map(lambda b: (b.group.part, b.stats))
             | "MergeStats" >> beam.CombinePerKey(MergeStats()))
    return shards | "WriteSplitParams" >> WriteSplitParams(
        output_dir=plan.output_dir, outputs=splits.outputs, output_dirs=tuple(o.output_dir for o in outputs),
        sections=tuple(o.sections for o in outputs), extras=tuple(o.extra for o in outputs), eos_id=plan.eos_id,
        pad_id=plan.pad_id, vocab_size=plan.vocab_size, features=plan.features, stats=stats,
        rest_stats=rest_stats, dead_letters=dead_letters, summary_sections=plan.sections,
        summary_extra={**plan.extra, "features": list(plan.features)}, mixture=mixture,
        steps={"language": language, "quality": quality, "decontamination": decontam, "dedup": dedup})


def _tokenize(plan: JobPlan) -> TokenizeDocuments:
    return TokenizeDocuments(
        plan.tokenizer_files, split_len=plan.split_len, remove_bos_in_chunks=plan.remove_bos_in_chunks,
        append_eos=plan.traits.record == TEXT, drop_bos=plan.traits.fim, process_cpus=plan.process_cpus)


def _encode_conversations(plan: JobPlan) -> EncodeConversations:
    # Contents are normalized, rendered and tokenized together: the template decides the tokens.
    return EncodeConversations(plan.chat, plan.tokenizer_files, process_cpus=plan.process_cpus)


def _rows(plan: JobPlan, batches):
    """TokenBatch (Chat and DPO: EncodedBatch) -> the mode's rows (RowBlock, or WindowBlock whose rows are built
    a batch at a time)."""
    return build_rows(plan.traits, plan, batches)


def _write_shards(plan: JobPlan, rows, stored, *, row_format, output_dir):
    """Rows -> compressed chunks -> shards (every mode alike); returns (the encoded blocks, the shards)."""
    blocks = rows | "EncodeRows" >> EncodeRows(row_format, plan.tokenizer_files, gzip_level=plan.codec,
                                               process_cpus=plan.process_cpus)
    if plan.storage_dir:
        blocks = blocks | "StoreGroups" >> StoreGroups(plan.storage_dir)
    if stored is not None:
        blocks = (blocks, stored) | "WithStoredGroups" >> beam.Flatten()
    shards = blocks | "WriteHdf5Shards" >> WriteHdf5Shards(
        output_dir=output_dir, output_name=plan.output_name, files_per_record=plan.files_per_record,
        num_output_files=plan.num_output_files, shuffle_seed=plan.shuffle_seed,
        max_seq_length=PerPart(tuple(f.max_seq_length for f in row_format.values))
        if isinstance(row_format, PerPart) else row_format.max_seq_length,
        features=len(plan.features), gzip_level=plan.gzip_level, keep_existing=plan.resume)
    return blocks, shards


def _write(plan: JobPlan, rows, stored, dead_letters, mixture=None, steps=None):
    """Rows -> shards, dead letters counted, data_params.json (one dataset; `mixture`: its plan's summary;
    `steps`: the summaries of the stages that removed records)."""
    blocks, shards = _write_shards(plan, rows, stored, row_format=plan.row_format, output_dir=plan.output_dir)
    stats = blocks | "Stats" >> beam.Map(lambda b: b.stats) | "MergeStats" >> beam.CombineGlobally(MergeStats())
    return shards | "WriteDatasetParams" >> WriteDatasetParams(
        output_dir=plan.output_dir, sections=plan.sections, eos_id=plan.eos_id, pad_id=plan.pad_id,
        vocab_size=plan.vocab_size, features=plan.features, stats=stats, dead_letters=dead_letters,
        extra=plan.extra, mixture=mixture, steps=steps)
