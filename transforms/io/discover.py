"""Input discovery: which files a run reads, in which order.

Matches the reference (SPEC 1a "Input discovery"): a recursive search under
`input_dir` for the known extensions, or the paths listed in metadata files,
sorted as full path strings. Deliberate fix (COMPAT "Reading"): a metadata file
is never returned as a data file. fsspec does the listing, so `gs://` and
`memory://` inputs work the same way as local directories.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

import fsspec

__all__ = ["VALID_EXTENSIONS", "extension_of", "discover_input_files", "discover_source"]

logger = logging.getLogger(__name__)

VALID_EXTENSIONS = (".jsonl", ".json.gz", ".jsonl.zst", ".jsonl.zst.tar", ".txt", ".parquet")

# Longest first, so a name can only ever match its full compound extension
# (".jsonl.zst.tar" is checked before anything shorter could claim it).
_BY_LENGTH = tuple(sorted(VALID_EXTENSIONS, key=len, reverse=True))

_EXAMPLES_IN_WARNING = 5


def extension_of(path: str) -> Optional[str]:
    """The valid extension `path` ends with, or None. Case-sensitive, like the reference's rglob."""
    for ext in _BY_LENGTH:
        if path.endswith(ext):
            return ext
    return None


def discover_input_files(
    input_dir: Optional[str], metadata_files: Optional[list[str]]
) -> list[str]:
    """The sorted, de-duplicated list of input files.

    Raises FileNotFoundError when `input_dir` or a metadata file does not exist,
    and ValueError when no input file is found.
    """
    if isinstance(metadata_files, str):
        metadata_files = [m for m in metadata_files.split(",") if m.strip()]
    skipped: list[tuple[str, list[str]]] = []  # (where, names without a valid extension)
    if metadata_files:
        if input_dir:
            logger.warning(
                "both input_dir (%s) and metadata_files given; using metadata_files", input_dir
            )
        files = _from_metadata(metadata_files, skipped)
        where = "listed in " + ", ".join(metadata_files)
    elif input_dir:
        files = _from_directory(input_dir, skipped)
        where = "under " + input_dir
    else:
        raise ValueError("either input_dir or metadata_files must be given")
    if not files:
        # One line for the user: the skipped names are the likely explanation.
        hint = "; ".join(_describe_skipped(names, w) for w, names in skipped if names)
        raise ValueError(
            f"no input files with extensions {', '.join(VALID_EXTENSIONS)} found {where}"
            + (f" ({hint})" if hint else "")
        )
    for w, names in skipped:
        if names:
            logger.warning(_describe_skipped(names, w))
    return files


def discover_source(path: str) -> tuple[list[str], Optional[str]]:
    """A mixture source's input files and the root their relative paths count from (None: as listed).

    `path` is a directory (searched as input_dir is), a glob of files (`/data/web/*.jsonl.zst`, `**`
    for any depth; files without a valid extension are skipped), one data file (`.jsonl`, `.parquet`, ...)
    or a metadata file listing paths (any other name, `.txt` included, as metadata_files reads them).
    """
    if any(c in path for c in "*?["):
        fs, pattern = fsspec.core.url_to_fs(path)
        found = [p for p in fs.glob(pattern) if fs.isfile(p)]
        keep = sorted(p for p in found if extension_of(p) is not None)
        if not keep:
            raise ValueError(f"no input files with extensions {', '.join(VALID_EXTENSIONS)} match {path}")
        static = path.split("://", 1)[-1]
        static = static[:min(static.index(c) for c in "*?[" if c in static)]
        root = static.rsplit("/", 1)[0] if "/" in static else ""
        if _is_url(path):
            return sorted({fs.unstrip_protocol(p) for p in keep}), path.split("://", 1)[0] + "://" + root
        return keep, root or "."
    fs, root = fsspec.core.url_to_fs(path)
    if fs.isdir(root):
        return discover_input_files(path, None), path
    if extension_of(path) not in (None, ".txt"):  # one data file: itself, named by its file name
        if not fs.exists(root):
            raise FileNotFoundError(f"no such file: {path}")
        return [path], path.rsplit("/", 1)[0] if "/" in path else "."
    return discover_input_files(None, [path]), None


def _from_directory(input_dir: str, skipped: list) -> list[str]:
    fs, root = fsspec.core.url_to_fs(input_dir)
    if not fs.exists(root):
        raise FileNotFoundError(f"input_dir does not exist: {input_dir}")
    if not fs.isdir(root):
        raise NotADirectoryError(f"input_dir is not a directory: {input_dir}")
    found = fs.find(root)
    keep = [p for p in found if extension_of(p) is not None]
    names = [p for p in found if extension_of(p) is None]
    if not _is_url(input_dir):
        # A link to a directory (never followed, as the reference's rglob does not), a loop or a dangling link is
        # listed as a name; calling it "a file without a valid extension" would send the user looking elsewhere.
        links = [p for p in names if os.path.islink(p) and not os.path.isfile(p)]
        if links:
            logger.warning("skipped %d link(s) under %s that lead to no file (a link to a directory is not "
                           "followed; a loop or a missing target leads nowhere), e.g. %s", len(links), input_dir,
                           ", ".join(links[:_EXAMPLES_IN_WARNING]))
            linked = set(links)
            names = [p for p in names if p not in linked]
    skipped.append((input_dir, names))
    if _is_url(input_dir):
        return sorted({fs.unstrip_protocol(p) for p in keep})
    # Local paths come back spelled the way the reference's Path(input_dir).rglob
    # spells them (relative stays relative), so logs and dead letters read naturally.
    base = Path(input_dir)
    root_norm = os.path.normpath(root)
    return sorted({str(base / os.path.relpath(os.path.normpath(p), root_norm)) for p in keep})


def _from_metadata(metadata_files: list[str], skipped: list) -> list[str]:
    listed: list[str] = []
    for meta in metadata_files:
        listed.extend(_read_metadata_file(meta, skipped))
    # A metadata file is a ".txt", so listing it (or a sibling metadata file)
    # would otherwise read it as a document.
    own = {_normalize(m) for m in metadata_files}
    dropped = [p for p in listed if _normalize(p) in own]
    if dropped:
        logger.warning("not reading metadata files as data: %s", ", ".join(sorted(set(dropped))))
    return sorted({p for p in listed if _normalize(p) not in own})


def _read_metadata_file(meta: str, skipped: list) -> list[str]:
    try:
        with fsspec.open(meta, "rt", encoding="utf-8") as fh:
            names = [line.strip() for line in fh]
    except FileNotFoundError:
        raise FileNotFoundError(f"metadata file does not exist: {meta}") from None
    names = [n for n in names if n]
    keep = [n for n in names if extension_of(n) is not None]
    skipped.append((meta, [n for n in names if extension_of(n) is None]))
    return keep


def _describe_skipped(skipped: list[str], where: str) -> str:
    examples = ", ".join(skipped[:_EXAMPLES_IN_WARNING])
    return f"skipped {len(skipped)} file(s) without a valid extension in {where}, e.g. {examples}"


def _is_url(path: str) -> bool:
    return "://" in path


def _normalize(path: str) -> str:
    if _is_url(path):
        return path
    return os.path.abspath(path)

