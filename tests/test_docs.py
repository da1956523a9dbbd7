"""The documentation cannot rot: every command it shows is run, and what it describes is what the code does.

- A ```bash block marked `<!-- runnable -->` (the line before it) is run, in page order, in a fresh directory
  holding the repository's `data/` and `configs/`, with this environment's `create_hdf5_dataset` first on PATH;
  it must exit 0.
- A ```bash block that runs the tool and is not marked runnable must say why (`<!-- not run: ... -->`): it
  needs what a test machine has not (a cloud project, a Flink cluster, a model's tokenizer).
- Every section of every `data_params.json` those commands write is described in docs/reference/data-params.md.
- README.md stays short (under 12 KB): the rest is the site (`make docs`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
PAGES = [p for p in PAGES if "_build" not in p.parts]
TOOL = re.compile(r"^\s*(create_hdf5_dataset|preprocess_data|python -m pipelines\.)", re.MULTILINE)
RUNNABLE = "<!-- runnable -->"
NOT_RUN = re.compile(r"<!-- not run: .+ -->")


def _blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line, marker line before it, body) of every ```bash / ```console block of the page."""
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(bash|console|sh)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, m.group(1)
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        before = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        out.append((start + 1, before, "\n".join(body)))
        i += 1
    return out


def _runnable(page: Path) -> list[tuple[int, str]]:
    return [(line, body) for line, before, body in _blocks(page) if before == RUNNABLE]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_readme_is_short():
    size = (ROOT / "README.md").stat().st_size
    assert size < 12_000, f"README.md is {size} bytes: keep it under 12 KB, the rest belongs in docs/"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_is_run_or_says_why_not(page):
    unmarked = [line for line, before, body in _blocks(page)
                if TOOL.search(body) and before != RUNNABLE and not NOT_RUN.fullmatch(before)]
    assert not unmarked, (f"{_name(page)}: the blocks at lines {unmarked} run the tool but are neither "
                          f"{RUNNABLE} nor <!-- not run: why -->")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """Every page's runnable blocks, run: page -> the directory they ran in."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": str(ROOT)}
    env.pop("CREATE_HDF5_DATASET_HEAD_START", None)
    done = {}
    for page in PAGES:
        blocks = _runnable(page)
        if not blocks:
            continue
        work = tmp_path_factory.mktemp(page.stem)
        for name in ("data", "configs"):
            (work / name).symlink_to(ROOT / name)
        for line, body in blocks:
            proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=600)
            done.setdefault(_name(page), work)
            assert proc.returncode == 0, (f"{_name(page)} line {line} exited {proc.returncode}:\n{body}\n"
                                          f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    return done


def test_the_runnable_blocks_run(written):
    assert "README.md" in written and any(k.startswith("docs/guides/") for k in written)


def test_every_data_params_section_is_documented(written):
    reference = (ROOT / "docs" / "reference" / "data-params.md").read_text()
    documented = set(re.findall(r"`([A-Za-z_][\w-]*)`", reference))
    found = set()
    for work in written.values():
        for path in Path(work).rglob("data_params.json"):
            found |= set(json.loads(path.read_text()))
    assert found, "the runnable blocks wrote no dataset"
    missing = sorted(found - documented)
    assert not missing, f"data_params.json sections not described in docs/reference/data-params.md: {missing}"
