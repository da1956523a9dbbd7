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


_BLOCK_BEAM = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'apache_beam' or name.startswith('apache_beam.'):\n"
               "            raise ImportError('apache_beam is blocked')\n"
               "sys.meta_path.insert(0, Block())\n")


@pytest.mark.parametrize("what, code", [
    # Training code imports the map-style reader, the sampler and the conversion.
    ("training readers", "from transforms.io.map_dataset import H5MapDataset, ResumableSampler, to_hf_causal_lm\n"
                         "from transforms.io.dataset import H5Dataset\n"),
    # The read hooks' loader and the regions' check run in the reader, and in a user's own tests of a hook.
    ("read hooks", "from transforms.io.hooks import load_hook, parse_hook_spec\n"
                   "from transforms.core.regions import read_semantic_array\n"
                   "hook = load_hook(parse_hook_spec('text_read_hook'))\n"
                   "assert read_semantic_array(hook({'t': 'x'}, text_key='t'))\n"),
])
def test_imports_without_beam(what, code):
    import subprocess
    import sys

    code = _BLOCK_BEAM + code + "assert not any(m.startswith('apache_beam') for m in sys.modules)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{what}: {proc.stderr}"
