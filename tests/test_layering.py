"""The architecture, checked: imports point inward only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
            if node.module.startswith("transforms."):
                names.add(".".join(node.module.split(".")[:2]))
    return names


CORE = sorted((ROOT / "transforms" / "core").rglob("*.py"))
NOT_PIPELINES = sorted((ROOT / "transforms").rglob("*.py"))


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT / "transforms" / "core")))
def test_core_is_pure(path):
    imports = _imports(path)
    assert "apache_beam" not in imports
    assert not imports & {"transforms.io", "transforms.stages", "pipelines", "h5py", "fsspec", "argparse", "yaml"}


@pytest.mark.parametrize("path", NOT_PIPELINES, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_pipelines_know_flags_and_yaml(path):
    imports = _imports(path)
    assert not imports & {"argparse", "yaml", "pipelines"}
    assert "PipelineOptions" not in path.read_text()
