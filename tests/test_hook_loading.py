"""transforms.io.hooks: a config's read_hook parsed, loaded (built-in, module, file) and saved as hook.py."""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import fsspec
import pytest
import yaml

from transforms.core import hooks210
from transforms.core.hooks210 import BUILTIN_HOOKS, MODELZOO_HOOKS_MODULE, check_hook_kwargs
from transforms.io.hooks import HookSpec, hook_source, load_hook, parse_hook_spec

ROOT = Path(__file__).resolve().parents[1]
CONFIGS_210 = sorted((ROOT / "tests" / "data" / "cerebras210").glob("*.yaml"))

HOOK_FILE = textwrap.dedent('''\
    """A user's read hook."""
    import re

    PREFIX = "Q: "


    def qa_hook(example, **kwargs):
        return [{"type": "prompt", "content": [{"text": PREFIX + example[kwargs["q_key"]]}]},
                {"type": "completion", "content": [{"text": re.sub(r"\\s+", " ", example[kwargs["a_key"]])}]}]


    def failing_hook(example, **kwargs):
        raise KeyError("no such column")


    NOT_A_FUNCTION = 3
    ''')


@pytest.fixture
def hook_file(tmp_path):
    path = tmp_path / "my_hooks.py"
    path.write_text(HOOK_FILE)
    return path


# --- built-in hooks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILTIN_HOOKS))
def test_builtin_names_load_our_hooks(name):
    spec = parse_hook_spec(f"  {name} ")
    assert spec.is_builtin and spec.name == name
    assert (spec.module, spec.path, spec.source) == ("transforms.core.hooks210", None, None)
    assert load_hook(spec) is BUILTIN_HOOKS[name]
    assert spec.function == BUILTIN_HOOKS[name].__name__


def test_the_2_10_alias_names_the_prompt_completion_text_hook():
    spec = parse_hook_spec(f"{MODELZOO_HOOKS_MODULE}:prompt_completion_key")
    assert spec.function == "prompt_completion_text_read_hook"
    assert load_hook(spec) is hooks210.prompt_completion_text_read_hook


def test_our_module_named_as_a_module_is_builtin_too():
    spec = parse_hook_spec("transforms.core.hooks210:chat_read_hook")
    assert spec.is_builtin and load_hook(spec) is hooks210.chat_read_hook


@pytest.mark.parametrize("text", [f"{MODELZOO_HOOKS_MODULE}:finetuning_llava_hook",
                                  f"{MODELZOO_HOOKS_MODULE}.pretraining_image_captions_hook",
                                  "finetuning_image_captions_hook",
                                  f"{MODELZOO_HOOKS_MODULE}:finetuning_llava_hook_prompt_completion"])
def test_2_10s_image_hooks_are_refused_as_multimodal(text):
    with pytest.raises(ValueError, match="multimodal data is not supported"):
        parse_hook_spec(text)


def test_a_hook_2_10_does_not_have_is_refused_with_the_list():
    with pytest.raises(ValueError, match="Model Zoo 2.10 has no hook 'chat_hook'") as info:
        parse_hook_spec(f"{MODELZOO_HOOKS_MODULE}:chat_hook")
    assert "chat_read_hook" in str(info.value) and "text_read_hook" in str(info.value)


def test_a_dotted_2_10_name_is_told_its_colon_form():
    with pytest.raises(ValueError, match=f"'{MODELZOO_HOOKS_MODULE}:chat_read_hook'"):
        parse_hook_spec(f"{MODELZOO_HOOKS_MODULE}.chat_read_hook")


@pytest.mark.parametrize("config", CONFIGS_210, ids=lambda p: p.stem)
def test_every_shipped_2_10_config_names_a_hook_we_load_or_refuse_as_multimodal(config):
    processing = yaml.safe_load(config.read_text())["processing"]
    if "read_hook" not in processing:
        pytest.skip("names no read hook")  # llava_single_image_token.yaml
    name, kwargs = processing["read_hook"], processing["read_hook_kwargs"]
    if any(word in name for word in ("llava", "image")):
        with pytest.raises(ValueError, match="multimodal"):
            parse_hook_spec(name)
        return
    hook = load_hook(parse_hook_spec(name))
    assert hook in hooks210.REQUIRED_KWARGS
    check_hook_kwargs(hook, kwargs)


# --- module hooks ---------------------------------------------------------------------------------------------

@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "site"
    (root / "corp_hooks").mkdir(parents=True)
    (root / "corp_hooks" / "__init__.py").write_text("")
    (root / "corp_hooks" / "readers.py").write_text(HOOK_FILE)
    (root / "corp_hooks" / "broken.py").write_text("import not_installed_anywhere_xyz\n")
    (root / "corp_hooks" / "raises.py").write_text("raise RuntimeError('no config')\n")
    monkeypatch.syspath_prepend(str(root))
    yield "corp_hooks"
    for name in [m for m in sys.modules if m.startswith("corp_hooks")]:
        del sys.modules[name]


def test_a_module_hook_is_imported(package):
    spec = parse_hook_spec("corp_hooks.readers:qa_hook")
    assert spec == HookSpec(name="corp_hooks.readers:qa_hook", function="qa_hook", module="corp_hooks.readers")
    assert not spec.is_builtin
    hook = load_hook(spec)
    assert hook({"q": "a?", "a": "b  c"}, q_key="q", a_key="a")[1]["content"] == [{"text": "b c"}]
    assert hook_source(spec) == HOOK_FILE  # the module's source, for OUT/hook.py


@pytest.mark.parametrize("text, words", [
    ("corp_hooks.nothing:f", "cannot import module corp_hooks.nothing"),
    ("corp_hooks.broken:f", "it imports 'not_installed_anywhere_xyz', which is not installed"),
    ("corp_hooks.raises:f", "importing module corp_hooks.raises failed: RuntimeError: no config"),
    ("corp_hooks.readers:missing", "has no 'missing' (its functions: failing_hook, qa_hook)"),
    ("corp_hooks.readers:NOT_A_FUNCTION", "'NOT_A_FUNCTION' in module corp_hooks.readers is int, not a function"),
])
def test_module_hook_problems_are_value_errors_that_say_what(package, text, words):
    spec = parse_hook_spec(text)  # parsing imports nothing
    with pytest.raises(ValueError) as info:
        load_hook(spec)
    assert words in str(info.value)


# --- file hooks -----------------------------------------------------------------------------------------------

def test_a_file_hook_carries_its_source(hook_file):
    spec = parse_hook_spec(f"{hook_file}:qa_hook")
    assert (spec.path, spec.function, spec.module, spec.source) == (str(hook_file), "qa_hook", None, HOOK_FILE)
    hook = load_hook(spec)
    assert hook({"q": "why", "a": "x\n\ny"}, q_key="q", a_key="a") == [
        {"type": "prompt", "content": [{"text": "Q: why"}]}, {"type": "completion", "content": [{"text": "x y"}]}]
    assert hook_source(spec) == HOOK_FILE


def test_a_file_hook_is_compiled_from_its_source_never_from_its_path(hook_file):
    spec = parse_hook_spec(f"{hook_file}:qa_hook")
    hook_file.unlink()
    spec = pickle.loads(pickle.dumps(spec))  # as a worker receives it
    hook = load_hook(spec)
    assert hook.__module__.startswith("_cerebras_hook_") and len(hook.__module__) == len("_cerebras_hook_") + 8
    assert hook.__module__ not in sys.modules  # no import elsewhere could find it: it pickles by value


def test_one_source_is_one_module_and_another_source_another(tmp_path, hook_file):
    first = load_hook(parse_hook_spec(f"{hook_file}:qa_hook"))
    assert load_hook(parse_hook_spec(f"{hook_file}:qa_hook")) is first
    assert load_hook(parse_hook_spec(f"{hook_file}:failing_hook")).__module__ == first.__module__
    other = tmp_path / "other.py"
    other.write_text(HOOK_FILE.replace("Q: ", "Question: "))
    second = load_hook(parse_hook_spec(f"{other}:qa_hook"))
    assert second.__module__ != first.__module__
    assert second({"q": "x", "a": "y"}, q_key="q", a_key="a")[0]["content"][0]["text"] == "Question: x"


def test_a_worker_loads_a_file_hook_from_the_spec_alone(hook_file, tmp_path):
    """Another process, another directory, the file gone: the spec is all it has."""
    blob = tmp_path / "spec.pickle"
    blob.write_bytes(pickle.dumps(parse_hook_spec(f"{hook_file}:qa_hook")))
    hook_file.unlink()
    worker = tmp_path / "worker"
    worker.mkdir()
    code = ("import pickle, sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from transforms.io.hooks import load_hook\n"
            f"spec = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
            "print(load_hook(spec)({'q': 'a', 'a': 'b'}, q_key='q', a_key='a')[0]['content'][0]['text'])\n")
    # A mutation run's first pass (MUTANT_UNDER_TEST=stats) has every call of the mutated core recorded, which needs
    # mutmut's setup.cfg in the working directory: this process runs elsewhere, so it runs the code unrecorded.
    env = {k: v for k, v in os.environ.items() if not (k == "MUTANT_UNDER_TEST" and v == "stats")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=worker, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Q: a"


def test_a_loaded_file_hook_pickles_by_value(hook_file, tmp_path):
    cloudpickle = pytest.importorskip("cloudpickle")
    blob = tmp_path / "fn.pickle"
    blob.write_bytes(cloudpickle.dumps(load_hook(parse_hook_spec(f"{hook_file}:qa_hook"))))
    code = ("import pickle\n"
            f"fn = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
            "print(fn({'q': 'a', 'a': 'b'}, q_key='q', a_key='a')[0]['content'][0]['text'])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Q: a"


def test_a_file_hook_failing_shows_its_own_lines_in_the_traceback(hook_file):
    hook = load_hook(parse_hook_spec(f"{hook_file}:failing_hook"))
    with pytest.raises(KeyError) as info:
        hook({})
    text = "".join(traceback.format_exception(info.value))
    # The file's name as the first load of this source gave it (one module per source text, per process).
    assert "<read hook " in text and "my_hooks.py>" in text and 'raise KeyError("no such column")' in text
    assert "def failing_hook" in inspect.getsource(hook)


def test_a_file_hook_may_define_dataclasses_with_postponed_annotations(tmp_path):
    path = tmp_path / "dc.py"
    path.write_text(textwrap.dedent('''\
        from __future__ import annotations
        import dataclasses

        @dataclasses.dataclass(frozen=True)
        class Pair:
            q: str
            a: str

        def hook(example, **kwargs):
            p = Pair(example["q"], example["a"])
            return [{"type": "user", "content": [{"text": p.q}]}, {"type": "assistant", "content": [{"text": p.a}]}]
        '''))
    assert load_hook(parse_hook_spec(f"{path}:hook"))({"q": "x", "a": "y"})[1]["content"] == [{"text": "y"}]


def test_a_file_hook_from_an_fsspec_url():
    url = "memory://hook-loading-test/remote_hooks.py"
    with fsspec.open(url, "w") as f:
        f.write(HOOK_FILE)
    try:
        spec = parse_hook_spec(f"{url}:qa_hook")
        assert spec.path == url and spec.source == HOOK_FILE
        assert load_hook(spec)({"q": "u", "a": "v"}, q_key="q", a_key="a")[0]["content"][0]["text"] == "Q: u"
    finally:
        fsspec.filesystem("memory").rm(url)


def test_file_hook_problems_are_value_errors_that_say_what(tmp_path, hook_file):
    with pytest.raises(ValueError, match=r"hook file .*absent\.py not found"):
        parse_hook_spec(f"{tmp_path / 'absent.py'}:f")
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# caf\xe9\n")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        parse_hook_spec(f"{latin}:f")
    bad = tmp_path / "bad.py"
    bad.write_text("def hook(example):\n    return [\n\ndef other(:\n")
    spec = parse_hook_spec(f"{bad}:hook")  # read, not yet compiled
    with pytest.raises(ValueError, match=r"syntax error in hook file .*bad\.py, line \d+"):
        load_hook(spec)
    crashing = tmp_path / "crashing.py"
    crashing.write_text("x = 1 / 0\n")
    with pytest.raises(ValueError, match="running hook file .*crashing.py failed: ZeroDivisionError"):
        load_hook(parse_hook_spec(f"{crashing}:hook"))
    with pytest.raises(ValueError, match="has no 'nope' \\(its functions: failing_hook, qa_hook\\)"):
        load_hook(parse_hook_spec(f"{hook_file}:nope"))
    with pytest.raises(ValueError, match="'NOT_A_FUNCTION' in hook file .* is int, not a function"):
        load_hook(parse_hook_spec(f"{hook_file}:NOT_A_FUNCTION"))


def test_the_syntax_error_names_its_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef hook(example:\n    pass\n")
    with pytest.raises(ValueError) as info:
        load_hook(parse_hook_spec(f"{bad}:hook"))
    assert ", line 4:" in str(info.value)


# --- what is not a hook spec ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("", "must be 'module:function'"),
    ("   ", "must be 'module:function'"),
    (None, "must be 'module:function'"),
    ("my_hook", "expected 'module:function' or 'path/to/hooks.py:function' (built-in hooks: chat_read_hook"),
    (":fn", "expected 'module:function'"),
    ("pkg.mod:", "'' is not a function name"),
    ("pkg.mod:1fn", "'1fn' is not a function name"),
    ("pkg mod:fn", "'pkg mod' is neither a module name nor a .py file"),
    ("pkg/mod:fn", "neither a module name nor a .py file"),
])
def test_malformed_specs_are_refused(text, words):
    with pytest.raises(ValueError) as info:
        parse_hook_spec(text)
    assert words in str(info.value)


def test_a_path_is_anything_ending_in_py_before_the_colon(tmp_path, monkeypatch, hook_file):
    monkeypatch.chdir(hook_file.parent)
    spec = parse_hook_spec("my_hooks.py:qa_hook")  # relative to the working directory
    assert spec.path == "my_hooks.py" and spec.source == HOOK_FILE


def test_a_spec_without_module_or_source_is_refused():
    with pytest.raises(ValueError, match="neither a module nor a file's source"):
        load_hook(HookSpec(name="x", function="f"))


# --- hook.py ------------------------------------------------------------------------------------------------------

def test_hook_source_of_a_builtin_is_our_hooks_module():
    source = hook_source(parse_hook_spec("chat_read_hook"))
    assert source == Path(hooks210.__file__).read_text()
    assert "def chat_read_hook" in source


def test_hook_source_of_a_module_without_source_says_so():
    source = hook_source(parse_hook_spec("sys:exit"))  # a built-in module: no file
    assert source.startswith("# read hook sys:exit: the source of module sys is not available")
