"""The architecture, checked: imports point inward only, the core touches no files, transforms/io (storage) imports
no Beam, the stages (Beam) touch files only through transforms/io, no module imports itself back."""

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
IO = sorted((ROOT / "transforms" / "io").rglob("*.py"))
STAGES = sorted((ROOT / "transforms" / "stages").rglob("*.py"))
NOT_PIPELINES = sorted((ROOT / "transforms").rglob("*.py"))


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT / "transforms" / "core")))
def test_core_is_pure(path):
    imports = _imports(path)
    assert "apache_beam" not in imports
    assert not imports & {"transforms.io", "transforms.stages", "pipelines", "h5py", "fsspec", "argparse", "yaml"}


@pytest.mark.parametrize("path", IO, ids=lambda p: str(p.relative_to(ROOT / "transforms" / "io")))
def test_io_is_storage_without_beam(path):
    """transforms/io reads and writes (readers, writers, file systems, formats, codecs), with no Beam, not even
    inside a function: every PTransform, DoFn, CombineFn and coder is in transforms/stages/, which io never imports."""
    imports = _imports(path)
    assert "apache_beam" not in imports
    assert not imports & {"transforms.stages", "pipelines"}


@pytest.mark.parametrize("path", NOT_PIPELINES, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_pipelines_know_flags_and_yaml(path):
    imports = _imports(path)
    assert not imports & {"argparse", "yaml", "pipelines"}
    assert "PipelineOptions" not in path.read_text()


# ---------------------------------------------------------------- the core does no file I/O

# What reaches a file system, by the name it is called with once imports are resolved (`import os as o`,
# `from os import replace` and `np.save` all count). Path arithmetic (os.path.join), the environment and
# in-memory buffers (io.BytesIO) do not; neither does importing a library, which reads its own files.
_FILE_CALLS = frozenset({
    "open", "io.open", "os.open", "os.fdopen", "os.replace", "os.rename", "os.renames", "os.remove", "os.unlink",
    "os.rmdir", "os.removedirs", "os.mkdir", "os.makedirs", "os.listdir", "os.scandir", "os.walk", "os.stat",
    "os.lstat", "os.chmod", "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime", "os.mkfifo",
    "os.path.exists", "os.path.lexists", "os.path.isfile", "os.path.isdir", "os.path.islink", "os.path.ismount",
    "os.path.getsize", "os.path.getmtime", "os.path.getatime", "os.path.getctime", "os.path.samefile",
    "os.path.realpath",
    "numpy.load", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.fromfile", "numpy.memmap",
    "numpy.loadtxt", "numpy.savetxt", "numpy.genfromtxt",
    # These take an open file: the core has strings and bytes, and their loads/dumps.
    "json.load", "json.dump", "pickle.load", "pickle.dump",
})
_FILE_METHODS = frozenset({"tofile"})  # ndarray.tofile, whatever the array is called
# Modules whose point is files; pathlib's pure paths are only names, so those are allowed.
_FILE_MODULES = frozenset({"tempfile", "shutil", "glob", "fileinput", "filecmp", "mmap", "fsspec", "h5py"})


def _file_io(source: str) -> list[str]:
    """What in `source` does file I/O, as "line: name"."""
    tree = ast.parse(source)
    names = {}  # local name -> the dotted name it stands for
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in _FILE_MODULES or a.name == "pathlib":
                    found.append((node.lineno, f"import {a.name}"))
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if (node.module.split(".")[0] in _FILE_MODULES or full in _FILE_CALLS
                        or (node.module == "pathlib" and not a.name.startswith("Pure"))):
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
                names[a.asname or a.name] = full
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts, f = [], node.func
        while isinstance(f, ast.Attribute):
            parts.append(f.attr)
            f = f.value
        if isinstance(node.func, ast.Attribute) and node.func.attr in _FILE_METHODS:
            found.append((node.lineno, f".{node.func.attr}()"))
        if isinstance(f, ast.Name):
            dotted = ".".join([names.get(f.id, f.id), *reversed(parts)])
            if dotted in _FILE_CALLS:
                found.append((node.lineno, f"{dotted}()"))
    return [f"{line}: {what}" for line, what in sorted(found)]


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT / "transforms" / "core")))
def test_core_does_no_file_io(path):
    """The core is handed text, bytes and arrays, and hands back the same; transforms/io reads and writes."""
    assert _file_io(path.read_text()) == []


@pytest.mark.parametrize("path", STAGES, ids=lambda p: str(p.relative_to(ROOT / "transforms" / "stages")))
def test_stages_do_file_io_only_through_io(path):
    """A stage's steps reach a file only by calling transforms/io (a reader, a writer, transforms.io.fs)."""
    assert _file_io(path.read_text()) == []


def _plans_changed(code: str) -> list[str]:
    """Where code makes a changed copy of a job's plan: `dataclasses.replace(plan, ...)` (or `replace(self, ...)`
    in a module that defines JobPlan) and `JobPlan(...)` itself."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = node.args[0] if node.args else None
            if name == "replace" and isinstance(first, ast.Name) and first.id in ("plan", "keyed", "job_plan"):
                found.append(f"{node.lineno}: replace({first.id}, ...)")
            elif name == "JobPlan":
                found.append(f"{node.lineno}: JobPlan(...)")
    return found


PLAN_MODULE = ROOT / "pipelines" / "plan.py"


# JobPlan lives in pipelines/, which nothing under transforms/ imports (test_core_is_pure and the like).
@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "pipelines").rglob("*.py") if p != PLAN_MODULE),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_plan_is_made_in_one_place(path):
    """pipelines.plan.plan_job makes a job's whole plan (what the runner decides included) and its views (a split's
    outputs); nobody changes it after."""
    assert _plans_changed(path.read_text()) == []


def test_the_plan_check_sees_what_it_looks_for():
    code = ("import dataclasses\nfrom dataclasses import replace\nplan = dataclasses.replace(plan, x=1)\n"
            "replace(plan, y=2)\nJobPlan(mode='m')\ndataclasses.replace(batch.group, part=1)\n")
    assert _plans_changed(code) == ["3: replace(plan, ...)", "4: replace(plan, ...)", "5: JobPlan(...)"]
    assert "JobPlan(...)" in " ".join(_plans_changed(PLAN_MODULE.read_text()))  # where it is made


@pytest.mark.parametrize("code, found", [
    # What the encoders' check cache did in the core before its files went to transforms/io/machine_cache.py.
    ("import os\nwith open(p, encoding='utf-8') as f: pass\nos.makedirs(d, exist_ok=True)\nos.replace(t, p)\n",
     ["2: open()", "3: os.makedirs()", "4: os.replace()"]),
    ("import os as o\nfrom os import replace as r\no.path.exists(p)\nr(a, b)\n",
     ["2: from os import replace", "3: os.path.exists()", "4: os.replace()"]),
    ("import numpy as np\nimport tempfile\nfrom pathlib import Path\nnp.save(f, a)\na.tofile(f)\n",
     ["2: import tempfile", "3: from pathlib import Path", "4: numpy.save()", "5: .tofile()"]),
    ("import io, os, json\nfrom pathlib import PurePosixPath\nio.BytesIO(b'')\nos.path.join(a, b)\n"
     "os.environ.get('X')\njson.loads(s)\nself.open()\n", []),
])
def test_the_file_io_check_sees_what_it_looks_for(code, found):
    assert _file_io(code) == found


# ---------------------------------------------------------------- no import cycles

PROJECT = sorted([*(ROOT / "transforms").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")])


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_time_imports(tree: ast.AST) -> list:
    """The import statements that run when the module is imported: all but those inside a function."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        found.extend(_import_time_imports(node))
    return found


def _import_graph(deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports at import time (`deferred`: or inside a function, later).

    `from p import n` points at p.n when that is a module, else at p. The packages a dotted name passes
    through are not edges: a package's __init__ importing its own modules, which import each other, is
    how a package is made; a module importing the package it belongs to (or anything that leads back to
    itself) is a cycle.
    """
    paths = {_module_name(p): p for p in PROJECT}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        nodes = ([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] if deferred
                 else _import_time_imports(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in paths)
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                target = f"{base}.{a.name}"
                if target in paths:
                    edges.add(target)
                elif base in paths:
                    edges.add(base)
        graph[name] = edges - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles():
    """A cycle makes what a module finds at import depend on which module was imported first."""
    graph = _import_graph()
    # The graph is the real one: a few edges that must be in it.
    assert {"transforms.core.tokenizer.check_cache", "transforms.core.tokenizer.exact"} <= graph[
        "transforms.core.tokenizer.backends"]
    assert "transforms.io.readers.jsonl" in graph["transforms.io.readers"]
    assert "transforms.io.readers.common" in graph["transforms.io.readers.txt"]
    assert _cycles(graph) == []


def test_no_cycles_through_deferred_imports_either():
    """An import inside a function defers a cycle, it does not remove one: the modules still depend on each
    other (the command on the estimate, the estimate on the command), which is what a newcomer has to untangle."""
    assert _cycles(_import_graph(deferred=True)) == []


def test_the_cycle_check_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}, "g": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["e", "f"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


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
    # Storage is storage: every transforms/io module imports without Beam, whatever it imports in turn.
    ("storage", "import importlib, pkgutil, transforms.io\n"
                "for m in pkgutil.walk_packages(transforms.io.__path__, 'transforms.io.'):\n"
                "    importlib.import_module(m.name)\n"),
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
