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


def test_the_training_readers_import_without_beam():
    """Training code imports the map-style reader, the sampler and the conversion without Apache Beam."""
    import subprocess
    import sys

    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'apache_beam' or name.startswith('apache_beam.'):\n"
            "            raise ImportError('apache_beam is blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from transforms.io.map_dataset import H5MapDataset, ResumableSampler, to_hf_causal_lm\n"
            "from transforms.io.dataset import H5Dataset\n"
            "assert not any(m.startswith('apache_beam') for m in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
