"""Find a config's read hook and load it, on the machine that starts the job and on every worker.

A 2.10 config's `processing.read_hook` is one of:

- a built-in hook, by its short name (`chat_read_hook`) or 2.10's import
  path (`cerebras.modelzoo.data_preparation.data_preprocessing.hooks:
  chat_read_hook`): our re-implementation, transforms.core.hooks210;
- `package.module:function`, imported on the worker (the module must be
  installed there too);
- `path/to/hooks.py:function`, a local path or any fsspec URL: anything
  ending in `.py` before the colon.

A hook file is read once, when the job starts, and its text travels in the
`HookSpec`: a remote worker has the source but not the launcher's file
system, so `load_hook` compiles `spec.source` into a fresh module named
after its hash (`_cerebras_hook_<sha8>`) and never opens the path. The same
text gives the same module name on every machine.

`hook_source` is the text the job saves as OUT/hook.py, as 2.10 saves the
hook's source beside its output: the hook file's text, the hook module's
source, or for a built-in hook the source of transforms.core.hooks210.

Every problem is a ValueError that says what to fix: a missing file,
module or function, a name that is not a function, a syntax error (with its
line), a 2.10 hook we do not support.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import linecache
import re
import sys
import threading
import types
from typing import Callable, Optional

from transforms.core import hooks210
from transforms.core.chat.hooked import regions_value
from transforms.core.hooks210 import BUILTIN_HOOKS, MODELZOO_HOOKS_MODULE
from transforms.core.records import Rewritten
from transforms.core.regions import RegionDefaults, RegionError, read_semantic_array
from transforms.io import fs

__all__ = ["HookSpec", "ReadHookCheck", "hook_source", "load_hook", "parse_hook_spec"]

BUILTIN_MODULE = hooks210.__name__

# 2.10's hooks for image data: known names, so that a config naming one is told why, not "no such hook".
_MULTIMODAL_HOOKS = frozenset({"finetuning_llava_hook", "finetuning_llava_hook_prompt_completion",
                               "pretraining_image_captions_hook", "finetuning_image_captions_hook"})

_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

# Modules compiled from hook files in this process, by the sha256 of their text: a worker loads a hook once.
_LOADED: dict[str, types.ModuleType] = {}
_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class HookSpec:
    """A read hook, as the job carries it to its workers.

    `name` is the config's text; `function` the function's name; then
    either `module` (importable; a built-in hook's is
    transforms.core.hooks210) or `path` (a hook file, kept for messages
    only) with `source`, the file's text.
    """

    name: str
    function: str
    module: Optional[str] = None
    path: Optional[str] = None
    source: Optional[str] = None

    @property
    def is_builtin(self) -> bool:
        return self.module == BUILTIN_MODULE


def parse_hook_spec(text: str) -> HookSpec:
    """The HookSpec of a config's `read_hook`; a hook file is read here (local path or fsspec URL).

    >>> parse_hook_spec("chat_read_hook")
    HookSpec(name='chat_read_hook', function='chat_read_hook', module='transforms.core.hooks210', path=None, \
source=None)
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"processing.read_hook must be 'module:function' or 'path/to/hooks.py:function', "
                         f"not {text!r}")
    name = text.strip()
    if name in BUILTIN_HOOKS:
        return HookSpec(name=name, function=BUILTIN_HOOKS[name].__name__, module=BUILTIN_MODULE)
    where, colon, function = name.rpartition(":")
    if not colon and name in _MULTIMODAL_HOOKS:
        where, function = MODELZOO_HOOKS_MODULE, name
    elif not colon and name.startswith(MODELZOO_HOOKS_MODULE + "."):
        # 2.10's own multimodal_pretraining_conceptual_captions.yaml writes "...hooks.<name>" (2.10 fails on it).
        where, function = MODELZOO_HOOKS_MODULE, name[len(MODELZOO_HOOKS_MODULE) + 1:]
        if function not in _MULTIMODAL_HOOKS:
            raise ValueError(f"processing.read_hook {name!r}: expected 'module:function', here "
                             f"'{MODELZOO_HOOKS_MODULE}:{function}'")
    if not where:
        raise ValueError(f"processing.read_hook {name!r}: expected 'module:function' or "
                         f"'path/to/hooks.py:function' (built-in hooks: {_builtin_names()})")
    if not function.isidentifier():
        raise ValueError(f"processing.read_hook {name!r}: {function!r} is not a function name")
    if where == MODELZOO_HOOKS_MODULE:
        if function in _MULTIMODAL_HOOKS:
            raise ValueError(f"processing.read_hook {name!r}: {function} reads images; multimodal data is not "
                             "supported")
        raise ValueError(f"processing.read_hook {name!r}: Model Zoo 2.10 has no hook {function!r} "
                         f"(built-in hooks: {_builtin_names()})")
    if where.endswith(".py"):
        return HookSpec(name=name, function=function, path=where, source=_read_hook_file(where, name))
    if not _MODULE_RE.fullmatch(where):
        raise ValueError(f"processing.read_hook {name!r}: {where!r} is neither a module name nor a .py file")
    return HookSpec(name=name, function=function, module=where)


def load_hook(spec: HookSpec) -> Callable:
    """The hook function of a spec. A hook file's module is compiled from `spec.source`, never read from
    `spec.path`, and only once per process."""
    if spec.is_builtin and spec.function in BUILTIN_HOOKS:
        return BUILTIN_HOOKS[spec.function]
    if spec.source is not None:
        module = _compile_hook_file(spec)
        where = f"hook file {spec.path or spec.name}"
    elif spec.module is not None:
        module = _import(spec)
        where = f"module {spec.module}"
    else:
        raise ValueError(f"read hook {spec.name!r}: the spec has neither a module nor a file's source")
    if not hasattr(module, spec.function):
        functions = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise ValueError(f"read hook {spec.name!r}: {where} has no {spec.function!r}"
                         + (f" (its functions: {', '.join(functions)})" if functions else ""))
    fn = getattr(module, spec.function)
    if not callable(fn):
        raise ValueError(f"read hook {spec.name!r}: {spec.function!r} in {where} is {type(fn).__name__}, "
                         "not a function")
    return fn


def hook_source(spec: HookSpec) -> str:
    """The text to save as OUT/hook.py: what the job's hook is, for whoever reads the output later."""
    if spec.source is not None:
        return spec.source
    module = hooks210 if spec.is_builtin else _import(spec)
    try:
        return inspect.getsource(module)
    except (OSError, TypeError) as e:  # a compiled module, or one without a file
        return f"# read hook {spec.name}: the source of module {module.__name__} is not available ({e})\n"


def _read_hook_file(path: str, name: str) -> str:
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        raise ValueError(f"processing.read_hook {name!r}: hook file {path} not found") from None
    except OSError as e:
        raise ValueError(f"processing.read_hook {name!r}: cannot read hook file {path}: {e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"processing.read_hook {name!r}: hook file {path} is not UTF-8 text ({e})") from None


def _import(spec: HookSpec) -> types.ModuleType:
    try:
        return importlib.import_module(spec.module)
    except ModuleNotFoundError as e:
        missing = "" if e.name == spec.module else f" (it imports {e.name!r}, which is not installed)"
        raise ValueError(f"read hook {spec.name!r}: cannot import module {spec.module}{missing}: {e}") from e
    except Exception as e:  # the module's own code failed while importing
        raise ValueError(f"read hook {spec.name!r}: importing module {spec.module} failed: "
                         f"{type(e).__name__}: {e}") from e


def _compile_hook_file(spec: HookSpec) -> types.ModuleType:
    digest = hashlib.sha256(spec.source.encode("utf-8")).hexdigest()
    with _LOCK:
        module = _LOADED.get(digest)
        if module is not None:
            return module
        module_name = f"_cerebras_hook_{digest[:8]}"
        # Tracebacks name the hook file and show its lines, though no file is opened (mtime None: never
        # checked against a file).
        filename = f"<read hook {spec.path or spec.name}>"
        try:
            code = compile(spec.source, filename, "exec")
        except SyntaxError as e:
            raise ValueError(f"read hook {spec.name!r}: syntax error in hook file {spec.path}, line {e.lineno}: "
                             f"{e.msg}") from None
        linecache.cache[filename] = (len(spec.source), None, spec.source.splitlines(True), filename)
        module = types.ModuleType(module_name, f"read hook file {spec.path}")
        module.__file__ = filename
        # In sys.modules while it runs, as an import would be (dataclasses and typing look their module up
        # there), then out of it again: the name imports nowhere else, so whatever pickles the hook's
        # functions (a runner pickling a DoFn) must carry them by value, which works on any worker.
        sys.modules[module_name] = module
        try:
            exec(code, module.__dict__)
        except Exception as e:
            raise ValueError(f"read hook {spec.name!r}: running hook file {spec.path} failed: "
                             f"{type(e).__name__}: {e}") from e
        finally:
            sys.modules.pop(module_name, None)
        _LOADED[digest] = module
        return module


def _builtin_names() -> str:
    return ", ".join(sorted(n for n in BUILTIN_HOOKS if ":" not in n))


REGIONS, DOCUMENT, PREFERENCE = "regions", "document", "preference"
OUTPUTS = (REGIONS, DOCUMENT, PREFERENCE)


class ReadHookCheck:
    """The reader's check (transforms.io.readers `check`) for a job whose records go through a read hook.

    Runs the hook on the record's `*_key` columns (their values as read, JSON-decoded: None for a column a user's
    hook names that the record lacks, records.HookColumn) and checks what it
    returns (transforms.core.regions); a good record's values become its regions (`Rewritten`), a bad one is a
    dead letter with its raw line: `hook_raised` with the exception, or the array's defect. It runs in the
    reader so that the hook runs once per record and a dead letter still has the record's raw bytes.
    Picklable: the hook is loaded on first use in each process (a hook file from the source in its spec).
    """

    def __init__(self, spec: HookSpec, kwargs: dict, columns: tuple, defaults: RegionDefaults,
                 output: str = REGIONS):
        if output not in OUTPUTS:
            raise ValueError(f"output: expected one of {', '.join(OUTPUTS)}, got {output!r}")
        self.spec, self.kwargs, self.columns, self.defaults = spec, dict(kwargs), tuple(columns), defaults
        # What the record becomes: its regions (Chat rows), their text joined (a document of the LM modes), or
        # a preference pair (DPO: chosen, rejected, prompt).
        self.output = output
        self._hook: Optional[Callable] = None

    def __getstate__(self):
        return {**self.__dict__, "_hook": None}

    def __call__(self, values: tuple):
        if self._hook is None:
            self._hook = load_hook(self.spec)
        example = {c: json.loads(v) for c, v in zip(self.columns, values)}
        try:
            array = self._hook(example, **self.kwargs)
        except RegionError as e:  # a built-in hook's own refusal of the record, with its reason
            return e.reason, e.detail
        except Exception as e:  # noqa: BLE001 - the user's code: any failure is this record's, never the job's
            return "hook_raised", f"{self.spec.function} raised {type(e).__name__}: {_short_text(e)}"
        try:
            regions = read_semantic_array(array, self.defaults)
        except RegionError as e:
            return e.reason, e.detail
        if self.output == DOCUMENT:
            return _document(regions)
        if self.output == PREFERENCE:
            return _preference(regions)
        return Rewritten((regions_value(regions),))


def _preference(regions) -> "tuple[str, str] | Rewritten":
    """A DPO record: the chosen and the rejected regions' texts, and the prompt conversation (the regions before
    them: prompt turns as user messages), as the DPO mode reads a record (chosen, rejected, prompt); else why not.
    Loss weights and masks do not apply: DPO trains the responses. Texts are stripped, as 2.10's DPO strips them."""
    sides: dict = {"chosen": [], "rejected": []}
    prompt: list = []
    for r in regions:
        if r.kind in sides:
            sides[r.kind].append(r.text)
        elif sides["chosen"] or sides["rejected"]:
            return "not_a_preference", f"turn {r.turn}: a {r.kind} turn after the responses"
        elif prompt and prompt[-1]["_turn"] == r.turn:
            prompt[-1]["content"] += r.text
        else:
            prompt.append({"role": "user" if r.kind in ("prompt", "text", "context") else r.kind, "content": r.text,
                           "_turn": r.turn})
    missing = [k for k, texts in sides.items() if not texts]
    if missing or not prompt:
        what = " and ".join(missing) if missing else "prompt"
        return "not_a_preference", f"the array has no {what} turn (DPO needs a prompt, a chosen and a rejected one)"
    # Stripped, as 2.10's DPO strips its prompt and responses (a transcript cut after "Assistant:" leaves a space).
    messages = [{"role": m["role"], "content": m["content"].strip()} for m in prompt]
    return Rewritten((json.dumps("".join(sides["chosen"]).strip(), ensure_ascii=False),
                      json.dumps("".join(sides["rejected"]).strip(), ensure_ascii=False),
                      json.dumps(messages, ensure_ascii=False)))


def _document(regions) -> "tuple[str, str] | Rewritten":
    """A pretraining record: its regions' text joined, when every region is trained and attended, which is all
    the LM modes' rows can say (they train every token); else why not."""
    for r in regions:
        if r.loss_weight != 1:
            return "untrained_region", (f"turn {r.turn} part {r.part}: loss weight {r.loss_weight}; pretraining rows "
                                        "train every token (a hook in finetuning weights regions)")
        if not r.attend:
            return "attention_mask_not_written", (f"turn {r.turn} part {r.part}: its attention is masked, and "
                                                  "pretraining rows have no attention feature")
    return Rewritten(("".join(r.text for r in regions),))


def _short_text(e: BaseException, limit: int = 500) -> str:
    text = str(e)
    return text if len(text) <= limit else text[:limit] + "..."
