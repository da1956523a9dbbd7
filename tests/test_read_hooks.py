"""Read hooks of the user's own in a Cerebras 2.10 config: `processing.read_hook` naming a module's function
(`tests.hook_examples:qa_regions`) or a file's (`path/to/hooks.py:fn`). The hook's regions make the rows
(transforms/core/chat/hooked.py); a hook that raises or returns something else is a dead letter.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import MULTI_PROCESSING, REFERENCE, RUNNER, SHARED, read_rows, require_shared

QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"
EXAMPLES = Path(__file__).parent / "hook_examples.py"
RECORDS = [
    {"q": "What is 2+2?", "a": "Four."},
    {"q": "boom", "a": "never seen"},
    {"q": "bad", "a": "never seen"},
    {"q": "Capital of France?", "a": "Paris."},
]


def _config(tmp: Path, hook: str, *, output_dir=None, input_dir=None, mode="finetuning", extra="") -> Path:
    if input_dir is None:
        input_dir = tmp / "input"
        input_dir.mkdir()
        (input_dir / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    path = tmp / "config.yaml"
    path.write_text(f"""
setup:
    data: {{source: "{input_dir}", type: local}}
    output_dir: "{output_dir or tmp / 'out'}"
    mode: {mode}
processing:
    huggingface_tokenizer: "{QWEN}"
    max_seq_length: 96
    read_hook: "{hook}"
    read_hook_kwargs: {{question_key: q, answer_key: a}}
{extra}""")
    return path


def _run(config: Path, runner=RUNNER) -> int:
    from pipelines.create_hdf5_dataset import main

    return main(["--config", str(config), *runner])


@functools.lru_cache(maxsize=None)
def _tokenizer():
    """Built once per module (~0.6 s a build): only encoded and decoded with, never changed."""
    import tokenizers

    return tokenizers.Tokenizer.from_file(str(QWEN / "tokenizer.json"))


def _texts(row: np.ndarray, pad: int) -> tuple[str, str]:
    """(the row's text: its inputs and last label, the text of its trained labels)."""
    tok = _tokenizer()
    n = int((row[2] != pad).sum())
    ids = [int(x) for x in row[0][:n]] + [int(row[2][n - 1])]
    trained = [int(x) for x, m in zip(row[2], row[1]) if m]
    return tok.decode(ids, skip_special_tokens=False), tok.decode(trained, skip_special_tokens=False)


def _dead_letters(out: Path) -> list[dict]:
    return sorted((json.loads(line) for f in (out / "dead_letter").glob("*.jsonl") for line in open(f)),
                  key=lambda d: d["line"])


EXPECTED = [  # (the row's text, what it trains), written by hand from qa_regions and Qwen2.5's template
    ("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
     "<|im_start|>assistant\nAnswer: Four.<|im_end|>\n", " Four.<|im_end|>"),
    ("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
     "<|im_start|>assistant\nAnswer: Paris.<|im_end|>\n", " Paris.<|im_end|>"),
]


def _check_qa(out: Path) -> None:
    params = json.loads((out / "data_params.json").read_text())
    pad = params["processing"]["pad_id"]
    rows = read_rows(out)
    assert [_texts(r, pad) for r in rows] == EXPECTED  # " Four.": the token " Four" straddles both regions
    assert "[internal note]" not in json.dumps([_texts(r, pad) for r in rows])  # the dropped region
    letters = _dead_letters(out)
    assert [(d["line"], d["reason"]) for d in letters] == [(2, "hook_raised"), (3, "not_a_semantic_array")]
    assert "RuntimeError: the hook exploded" in letters[0]["detail"]
    assert json.loads(letters[0]["raw"]) == RECORDS[1]  # the record as read, for a rerun
    assert params["input"]["bad_by_reason"] == {"hook_raised": 1, "not_a_semantic_array": 1}
    assert params["input"]["used"] == 2


@pytest.fixture(scope="module")
def qa_job(tmp_path_factory) -> Path:
    """The output of the module hook qa_regions over RECORDS in finetuning, with the Qwen tokenizer: several
    tests read the very same job's output (none changes it), so it runs once."""
    require_shared(QWEN)
    tmp = tmp_path_factory.mktemp("qa_job")
    assert _run(_config(tmp, "tests.hook_examples:qa_regions")) == 0
    return tmp / "out"


@pytest.fixture(scope="module")
def custom_tokenizer_job(tmp_path_factory) -> Path:
    """The output of _custom_tokenizer_job, run once for the tests that read it; a test that changes it works on
    a copy."""
    require_shared(QWEN)
    return _custom_tokenizer_job(tmp_path_factory.mktemp("custom_tokenizer_job"))


@pytest.mark.parametrize("given", ["module", "file"])
def test_own_hook_regions_make_the_rows(given, tmp_path, request):
    require_shared(QWEN)
    from pipelines.tools.verify import verify_dataset

    if given == "module":
        out = request.getfixturevalue("qa_job")  # the same job as the module-scoped fixture's
    else:
        assert _run(_config(tmp_path, f"{EXAMPLES}:qa_regions")) == 0
        out = tmp_path / "out"
    _check_qa(out)
    assert verify_dataset(str(out)).ok
    assert "def qa_regions(" in (out / "hook.py").read_text()  # its source beside the output, as 2.10 saves it


def test_hook_file_travels_with_the_job(tmp_path):
    """The hook file is read once, when the job starts: the workers compile the text the job carries."""
    require_shared(QWEN)
    moved = tmp_path / "hooks_elsewhere.py"
    shutil.copy(EXAMPLES, moved)
    config = _config(tmp_path, f"{moved}:qa_regions")
    from pipelines.config import load_config
    from pipelines.plan import plan_job

    config_obj, _ = load_config(["--config", str(config)])
    plan = plan_job(config_obj)
    moved.unlink()  # what runs the records from here on has only the spec
    import pickle

    from transforms.io.hooks import ReadHookCheck

    check = pickle.loads(pickle.dumps(ReadHookCheck(plan.hook, dict(plan.hook_kwargs), ("q", "a"),
                                                    plan.region_defaults)))
    rewritten = check((json.dumps("What?"), json.dumps("That.")))
    assert type(rewritten).__name__ == "Rewritten"


def test_attention_masked_region_is_written_in_key_padding_mask(tmp_path):
    """With key_padding_mask: true the rows get a fourth feature, 1 where an input position is not attended: the
    masked region's tokens and the padding (2.10's multimodal convention); everything else is the Chat row."""
    require_shared(QWEN)
    from pipelines.tools.verify import verify_dataset

    config = _config(tmp_path, "tests.hook_examples:attention_masked", extra="dataset: {key_padding_mask: true}")
    assert _run(config) == 0
    out = tmp_path / "out"
    params = json.loads((out / "data_params.json").read_text())
    assert params["features"] == ["input_ids", "attention_mask", "labels", "key_padding_mask"]
    pad = params["processing"]["pad_id"]
    tok = _tokenizer()
    rows = read_rows(out)
    assert rows.shape == (4, 4, 96)
    for row, r in zip(rows, RECORDS):
        n = int((row[2] != pad).sum())
        masked = [int(x) for x, m in zip(row[0][:n], row[3][:n]) if m]
        assert tok.decode(masked, skip_special_tokens=False) == r["q"]  # exactly the question's tokens
        assert (row[3][n:] == 1).all()  # padding
        text, trained = _texts(row[:3], pad)
        assert trained == r["a"] + "<|im_end|>"
    assert verify_dataset(str(out)).ok
    import h5py  # verify checks the fourth row: padding attended is a problem it names

    (path,) = out.glob("*.h5")
    with h5py.File(path, "r+") as f:
        f["data"][0, 3, 95] = 0
    assert any("padding positions are attended" in p for p in verify_dataset(str(out)).problems)


def test_attention_masked_region_is_refused_and_counted(tmp_path):
    """These rows have no attention feature: a record that masks attention is refused, never written as if
    it were attended."""
    require_shared(QWEN)
    assert _run(_config(tmp_path, "tests.hook_examples:attention_masked")) == 0
    params = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert params["input"]["dropped_by_reason"] == {"attention_mask_not_written": 4}


def test_text_regions_are_joined_without_a_template(tmp_path):
    """prompt/completion regions: [BOS] + each region's tokens + EOS; the completion and EOS trained."""
    require_shared(QWEN)
    assert _run(_config(tmp_path, "tests.hook_examples:text_pairs", extra="    min_sequence_len: 2")) == 0
    out = tmp_path / "out"
    params = json.loads((out / "data_params.json").read_text())
    pad, eos = params["processing"]["pad_id"], params["processing"]["eos_id"]
    tok = _tokenizer()
    rows = read_rows(out)
    assert len(rows) == 4
    for row, r in zip(rows, RECORDS):
        q = tok.encode(r["q"], add_special_tokens=False).ids
        a = tok.encode(" " + r["a"], add_special_tokens=False).ids
        tokens = q + a + [eos]  # Qwen2.5 has no BOS
        n = len(tokens) - 1
        assert row[0][:n].tolist() == tokens[:-1] and (row[0][n:] == pad).all()
        assert row[2][:n].tolist() == tokens[1:]
        assert row[1][:n].tolist() == [0] * (len(q) - 1) + [1] * (len(a) + 1)


def test_regions_hook_equals_the_chat_mode(tmp_path):
    """A hook that gives one region per message, roles as types, writes the Chat mode's rows: here 2.10's
    golden chat case through chat_read_hook (whose rows equal 2.10's), and through a hook of our own."""
    require_shared(REFERENCE / "golden-2.10")
    source = REFERENCE / "golden-2.10" / "chat_qwen25_kto_multiturn_512" / "input"
    outs = []
    for hook, kwargs in (("chat_read_hook", "{multi_turn_key: messages, multi_turn_role_key: role, "
                                            "multi_turn_content_key: content}"),
                         ("tests.hook_examples:messages_as_regions", "{messages_key: messages}")):
        tmp = tmp_path / hook.replace(":", "_")
        tmp.mkdir()
        config = _config(tmp, hook, input_dir=source).read_text().replace(
            "{question_key: q, answer_key: a}", kwargs).replace("max_seq_length: 96", "max_seq_length: 512")
        (tmp / "config.yaml").write_text(config)
        assert _run(tmp / "config.yaml") == 0
        outs.append(read_rows(tmp / "out"))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert len(outs[0]) == 156


def test_prompt_completion_chat_read_hook_renders_pairs_as_chat(tmp_path):
    """2.10's prompt_completion_chat_read_hook: a pair becomes a user and an assistant turn (stripped), rendered
    with the template; the answer and its end of turn are trained."""
    require_shared(QWEN)
    config = _config(tmp_path, "prompt_completion_chat_read_hook")
    config.write_text(config.read_text().replace("{question_key: q, answer_key: a}",
                                                 "{prompt_key: q, completion_key: a}"))
    assert _run(config) == 0
    out = tmp_path / "out"
    params = json.loads((out / "data_params.json").read_text())
    texts = [_texts(r, params["processing"]["pad_id"]) for r in read_rows(out)]
    assert len(texts) == 4
    system = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    assert texts[0] == (system + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\nFour.<|im_end|>\n",
                        "Four.<|im_end|>")


def test_own_hook_in_nlg_is_a_finetuning(tmp_path, qa_job):
    """setup.mode nlg (context and completion) with a hook of your own: the same rows as finetuning (qa_job is
    that finetuning job)."""
    require_shared(QWEN)
    assert _run(_config(tmp_path, "tests.hook_examples:qa_regions", mode="nlg")) == 0
    np.testing.assert_array_equal(read_rows(tmp_path / "out"), read_rows(qa_job))


@pytest.mark.parametrize("hook, says", [
    ("tests.hook_examples:no_such_hook", "no 'no_such_hook'"),
    ("tests.no_such_module:qa_regions", "no_such_module"),
    ("/nowhere/hooks.py:fn", "not found"),
])
def test_hook_that_cannot_load_fails_before_reading(hook, says, tmp_path, capsys):
    require_shared(QWEN)
    assert _run(_config(tmp_path, hook)) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.worker_processes
@pytest.mark.parametrize("given", ["module", "file"])
def test_own_hook_on_worker_processes_to_gs(given, gcs, tmp_path):
    """multi_processing workers and the output on gs://: a module's hook is imported by every worker; a hook file
    (here on gs:// too) reaches every worker through the job (its source in the spec). The rows and dead letters
    are the in-process run's."""
    require_shared(QWEN)
    fs, bucket = gcs
    fs.put(str(EXAMPLES), f"{bucket}/code/hooks.py")
    out = f"gs://{bucket}/out"
    hook = "tests.hook_examples:qa_regions" if given == "module" else f"gs://{bucket}/code/hooks.py:qa_regions"
    config = _config(tmp_path, hook, output_dir=out)
    assert _run(config, MULTI_PROCESSING + ["--direct_num_workers", "2"]) == 0
    local = tmp_path / "fetched"
    fs.get(f"{bucket}/out", str(local), recursive=True)
    _check_qa(local)
    assert "def qa_regions(" in (local / "hook.py").read_text()


from tests.test_gcs import emulator, gcs  # noqa: E402,F401 - the gs:// fixtures


# ---------------------------------------------------------------- the regions encoded in batches


class _CountingBackend:
    """A tokenizers.Tokenizer that counts its encode_batch calls and the texts of each."""

    def __init__(self, backend):
        self._backend = backend
        self.batches: list[int] = []

    def encode_batch(self, texts, **kwargs):
        self.batches.append(len(texts))
        return self._backend.encode_batch(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self._backend, name)


@pytest.mark.parametrize("attention", [False, True])
def test_regions_are_encoded_in_batches_as_one_at_a_time(attention):
    """A group's hooked records are encoded a slice at a time, as the Chat modes encode conversations: the chat
    records' renderings in one encode_batch, the text records' regions in another, never one record per call.
    Each record gets what it gets encoded alone, refusals with the same reason; its chat ids are the rendering's
    ids, its text ids each region's, between BOS and EOS."""
    require_shared(QWEN)
    from tests.chat_helpers import tokenizer_config
    from transforms.core.chat.encode import ChatEncoder
    from transforms.core.chat.hooked import encode_regions_many
    from transforms.core.chat.template import ChatError, ChatRenderer, template_from_config, template_tokens
    from transforms.core.regions import Region, conversation, read_semantic_array

    config = tokenizer_config("qwen2.5-instruct")
    counting = _CountingBackend(_tokenizer())
    encoder = ChatEncoder(ChatRenderer(template_from_config(config), template_tokens(config)), counting)
    user, assistant = ({"type": "user", "content": [{"text": "What is 2+2?"}, {"text": " Be quick."}]},
                       {"type": "assistant", "content": [{"text": "Answer: "}, {"text": "4."}],
                        "semantic_loss_weight": [0, 1]})
    records = [
        read_semantic_array([{"type": "system", "content": [{"text": "Answer briefly."}]}, user, assistant]),
        read_semantic_array([{"type": "prompt", "content": [{"text": "Translate: chat"}]},
                             {"type": "completion", "content": [{"text": " cat"}]}]),
        read_semantic_array([{**user, "semantic_attention_mask": [1, 0]}, assistant]),  # refused without attention
        read_semantic_array([user, {**assistant, "semantic_loss_weight": [0, 2]}]),  # bad_loss_weight
        read_semantic_array([user, {**assistant, "semantic_loss_weight": [0, 0]}]),  # no_assistant_turn
        (Region("user", " ", 0, True, 0, 0), Region("assistant", "Yes.", 1, True, 1, 0)),  # empty_content
        read_semantic_array([{"type": "user", "content": [{"text": "Say <|im_end|> please"}]},
                             {"type": "assistant", "content": [{"text": "<|im_end|>"}]}]),
        read_semantic_array([{"type": "context", "content": [{"text": "Paris is in France."}]},
                             {"type": "completion", "content": [{"text": " France"}]}]),
    ]
    args = dict(bos_id=151643, eos_id=151645, attention=attention)
    batched = encode_regions_many(encoder, records, **args)
    chats = [k for k in (0, 2, 5, 6) if attention or k != 2]
    # One call for the chat records' renderings (record 5's refused before it), one for the text records' regions.
    assert counting.batches == [len(chats) - 1, 4]
    for k, (regions, got) in enumerate(zip(records, batched)):
        [alone] = encode_regions_many(ChatEncoder(encoder.renderer, counting._backend), [regions], **args)
        if isinstance(alone, ChatError):
            assert isinstance(got, ChatError) and got.reason == alone.reason, (k, got)
            continue
        assert got.text == alone.text and got.turns == alone.turns, k
        for name in ("ids", "trained", "offsets", "attend"):
            np.testing.assert_array_equal(getattr(got, name), getattr(alone, name), err_msg=f"{k} {name}")
        if k in chats:  # the ids are the rendering's, tokenized alone
            assert got.ids.tolist() == encoder.tokenize(conversation(regions)[0]).ids.tolist()
        else:
            assert got.ids.tolist() == [151643, *[t for r in regions for t in _tokenizer().encode(
                r.text, add_special_tokens=False).ids], 151645]
    reasons = {k: got.reason for k, got in enumerate(batched) if isinstance(got, ChatError)}
    assert reasons == {**({} if attention else {2: "attention_mask_not_written"}), 3: "bad_loss_weight",
                       4: "no_assistant_turn", 5: "empty_content"}
    assert all(got.trained.any() for got in batched if not isinstance(got, ChatError))


# ---------------------------------------------------------------- custom_tokenizer: module:Class


def test_custom_tokenizer_class_gives_the_wrapped_tokenizers_rows(qa_job, custom_tokenizer_job):
    """2.10's custom_tokenizer contract (a class around a fast tokenizer, tokenizer_params its arguments): the
    rows equal those of the tokenizer it wraps, named directly (qa_job); its own pad id is used."""
    require_shared(QWEN)
    rows = {}
    for name, out in (("direct", qa_job), ("custom", custom_tokenizer_job)):
        rows[name] = read_rows(out)
        params = json.loads((out / "data_params.json").read_text())
        assert params["processing"]["pad_id"] == (0 if name == "custom" else 151643)
    direct, custom = rows["direct"], rows["custom"]
    real = direct != 151643
    np.testing.assert_array_equal(custom[real], direct[real])
    assert (custom[~real] == 0).all() and real.any()


def _custom_tokenizer_job(tmp_path) -> Path:
    config = _config(tmp_path, "tests.hook_examples:qa_regions")
    config.write_text(config.read_text().replace(
        f'    huggingface_tokenizer: "{QWEN}"\n',
        '    custom_tokenizer: "tests.tokenizer_examples:WrappedTokenizer"\n'
        f'    tokenizer_params: {{pretrained_model_name_or_path: "{QWEN}", pad_token_id: 0}}\n'))
    assert _run(config) == 0
    return tmp_path / "out"


def test_verify_rebuilds_an_importable_custom_tokenizer(tmp_path, custom_tokenizer_job):
    """`verify --trust_custom_tokenizer` builds the custom_tokenizer class with its tokenizer_params, as the job
    did: the tokenizer's checks run (the detokenized sizes recounted, the vocabulary compared), so a wrong count
    is caught."""
    require_shared(QWEN)
    from pipelines.tools.verify import verify_dataset

    out = tmp_path / "out"
    shutil.copytree(custom_tokenizer_job, out)  # a copy: this test changes its data_params.json
    result = verify_dataset(str(out), trust_custom_tokenizer=True)
    assert result.ok and not result.notes, result.lines()  # no check skipped, the tokenizer is the job's
    params_path = out / "data_params.json"
    params = json.loads(params_path.read_text())
    params["h5_dataset_stats"]["detokenized_chars"] += 1
    params_path.write_text(json.dumps(params))
    result = verify_dataset(str(out), trust_custom_tokenizer=True)
    wrong = params["h5_dataset_stats"]["detokenized_chars"]
    assert [p for p in result.problems if "detokenized" in p] == [
        f"data_params.json: h5_dataset_stats.detokenized_chars is {wrong}, the files recount to {wrong - 1}"]


def test_verify_without_the_custom_tokenizer_class_names_what_it_skipped(custom_tokenizer_job, monkeypatch):
    """Where the class cannot be imported (another machine), every other check still runs and passes, and the
    notes say exactly which checks were skipped, and why."""
    require_shared(QWEN)
    import sys

    from pipelines.tools.verify import verify_dataset

    out = custom_tokenizer_job
    monkeypatch.setitem(sys.modules, "tests.tokenizer_examples", None)  # an import of it now fails
    result = verify_dataset(str(out), trust_custom_tokenizer=True)
    assert result.ok, result.problems
    spec = "tests.tokenizer_examples:WrappedTokenizer"
    assert result.notes == [
        "h5_dataset_stats.detokenized_chars/bytes not checked: the tokenizer could not be rebuilt (see below)",
        f"tokenizer not rebuilt: cannot rebuild the tokenizer (custom_tokenizer {spec}): custom_tokenizer {spec}: "
        "cannot import tests.tokenizer_examples: import of tests.tokenizer_examples halted; None in sys.modules; "
        "skipped: h5_dataset_stats.detokenized_chars/bytes against the rows decoded; post-process.vocab_size "
        "against the tokenizer's vocabulary"], result.notes


def test_verify_runs_no_custom_tokenizer_code_unless_trusted(custom_tokenizer_job, capsys):
    """A data_params.json names the class its job built: checking the dataset does not import it unless asked
    (the file may come from anyone), and says which checks that skips and how to run them."""
    require_shared(QWEN)
    import sys

    from pipelines.create_hdf5_dataset import main
    from pipelines.tools.verify import verify_dataset

    out = custom_tokenizer_job
    sys.modules.pop("tests.tokenizer_examples", None)
    result = verify_dataset(str(out))
    assert "tests.tokenizer_examples" not in sys.modules  # nothing of it imported, so nothing of it ran
    assert result.ok, result.problems
    spec = "tests.tokenizer_examples:WrappedTokenizer"
    assert result.notes[1] == (
        f"tokenizer not rebuilt: custom_tokenizer {spec} not imported: building it runs its code "
        "(--trust_custom_tokenizer builds it as the job did); skipped: h5_dataset_stats.detokenized_chars/bytes "
        "against the rows decoded; post-process.vocab_size against the tokenizer's vocabulary"), result.notes
    assert main(["verify", str(out), "--trust_custom_tokenizer"]) == 0
    assert "not imported" not in capsys.readouterr().out


def test_custom_tokenizer_that_wraps_nothing_is_refused(tmp_path, capsys):
    config = _config(tmp_path, "tests.hook_examples:qa_regions")
    config.write_text(config.read_text().replace(
        f'    huggingface_tokenizer: "{QWEN}"\n', '    custom_tokenizer: "tests.tokenizer_examples:NotATokenizer"\n'))
    assert _run(config) == 2
    assert "does not wrap a Hugging Face fast tokenizer" in capsys.readouterr().err


def test_huggingface_tokenizer_with_tokenizer_params(tmp_path):
    """2.10 hands tokenizer_params to AutoTokenizer.from_pretrained: an argument that changes the tokens
    (a pad token of its own) changes the job's."""
    require_shared(QWEN)
    config = _config(tmp_path, "tests.hook_examples:qa_regions")
    config.write_text(config.read_text().replace(
        f'    huggingface_tokenizer: "{QWEN}"\n',
        f'    huggingface_tokenizer: "{QWEN}"\n    tokenizer_params: {{pad_token: "<|im_start|>"}}\n'))
    assert _run(config) == 0
    params = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert params["processing"]["pad_id"] == _tokenizer().token_to_id("<|im_start|>")
    from pipelines.tools.verify import verify_dataset

    result = verify_dataset(str(tmp_path / "out"))  # rebuilt with the same arguments: the job's tokenizer
    assert result.ok and not result.notes, result.lines()


def test_own_hook_in_pretraining_makes_the_documents(tmp_path):
    """pretraining: the regions' text is the document, so the rows are LMData's over that text; a region the
    hook leaves untrained cannot be said by LM rows: that record is a dead letter."""
    require_shared(QWEN)
    from pipelines.create_hdf5_dataset import main

    records = [{"title": f"Title {i}", "body": f"Body number {i} " * (5 + i)} for i in range(20)]
    records[3]["title"] = "untrained"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = _config(tmp_path, "tests.hook_examples:title_and_body", mode="pretraining",
                     input_dir=tmp_path / "in")
    config.write_text(config.read_text().replace("{question_key: q, answer_key: a}",
                                                 "{title_key: title, body_key: body}"))
    assert _run(config) == 0
    letters = _dead_letters(tmp_path / "out")
    assert [(d["line"], d["reason"]) for d in letters] == [(4, "untrained_region")]
    # The same documents as plain text records, through the LMData mode.
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "docs.jsonl").write_text("".join(
        json.dumps({"text": r["title"] + "\n\n" + r["body"]}) + "\n" for k, r in enumerate(records) if k != 3))
    assert main(["LMData", "--input_dir", str(tmp_path / "plain"), "--output_dir", str(tmp_path / "plain_out"),
                 "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(QWEN),
                 "--max_seq_length", "96", "--use_ftfy", "True", *RUNNER]) == 0
    np.testing.assert_array_equal(read_rows(tmp_path / "out"), read_rows(tmp_path / "plain_out"))


def test_own_hook_in_dpo_makes_the_pairs(tmp_path):
    """dpo: the regions before the responses are the prompt conversation, then the chosen and the rejected
    response: the rows are the DPO mode's over the same pairs; an array without both responses is a dead letter."""
    require_shared(QWEN)
    from pipelines.create_hdf5_dataset import main

    records = [{"q": f"Question {i}?", "a": f"Answer {i}."} for i in range(6)] + [{"q": "no answer", "a": "-"}]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = _config(tmp_path, "tests.hook_examples:preference", mode="dpo", input_dir=tmp_path / "in")
    assert _run(config) == 0
    assert [(d["line"], d["reason"]) for d in _dead_letters(tmp_path / "out")] == [(7, "not_a_preference")]
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "pairs.jsonl").write_text("".join(json.dumps({
        "prompt": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": r["q"]}],
        "chosen": r["a"], "rejected": "I do not know."}) + "\n" for r in records[:-1]))
    assert main(["DPO", "--input_dir", str(tmp_path / "plain"), "--output_dir", str(tmp_path / "plain_out"),
                 "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(QWEN),
                 "--prompt_key", "prompt", "--max_seq_length", "96", "--use_ftfy", "True", *RUNNER]) == 0
    np.testing.assert_array_equal(read_rows(tmp_path / "out"), read_rows(tmp_path / "plain_out"))
    assert len(read_rows(tmp_path / "out")) == 6


def test_a_changed_hook_file_is_another_job(tmp_path):
    """The job's fingerprint (what resume_from_checkpoint compares) covers the hook file's text, not only its
    path: resuming with other hook code would mix two jobs' rows."""
    from pipelines.config import load_config

    hooks = tmp_path / "hooks.py"
    hooks.write_text(EXAMPLES.read_text())
    config = _config(tmp_path, f"{hooks}:qa_regions")
    first = load_config(["--config", str(config)])[0].fingerprint()
    assert load_config(["--config", str(config)])[0].fingerprint() == first
    hooks.write_text(EXAMPLES.read_text().replace("Answer briefly.", "Answer at length."))
    assert load_config(["--config", str(config)])[0].fingerprint() != first


def test_dpo_read_hook_with_its_own_marker(tmp_path):
    """dpo_read_hook's assistant_role other than 'assistant:' is 2.10's rule, run as a hook: the prompt is the
    chosen text up to its last marker (one user message), the responses what follows; a pair without the
    marker is a dead letter."""
    require_shared(QWEN)
    records = [{"chosen": f"Q{i}: what is {i}?\nBOT: It is {i}.", "rejected": f"Q{i}: what is {i}?\nBOT: No idea."}
               for i in range(4)] + [{"chosen": "no marker", "rejected": "none"}]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = _config(tmp_path, "dpo_read_hook", mode="dpo", input_dir=tmp_path / "in")
    config.write_text(config.read_text().replace(
        "{question_key: q, answer_key: a}", '{chosen_key: chosen, rejected_key: rejected, assistant_role: "bot:"}'))
    assert _run(config) == 0
    out = tmp_path / "out"
    assert [(d["line"], d["reason"]) for d in _dead_letters(out)] == [(5, "no_assistant_marker")]
    rows = read_rows(out)
    assert len(rows) == 4
    text = _tokenizer().decode([int(x) for x in rows[1][0] if x != 151643], skip_special_tokens=False)
    assert "<|im_start|>user\nQ1: what is 1?\nBOT:<|im_end|>\n<|im_start|>assistant\nIt is 1.<|im_end|>" in text


# ---------------------------------------------------------------- a user's hook with chat_read_hook's kwargs


# A hook of the user's own taking chat_read_hook's kwargs: multi_turn_key names the record's column, the role and
# content kwargs name keys inside each message (2.10's hooks.py reads them with turn.get). 2.10 hands the hook every
# `*_key` kwarg's value as a column, None where the record lacks it: the hook checks that it is given exactly that.
OWN_CHAT_HOOK = '''
def my_chat_hook(example, **kw):
    assert set(example) == {kw["multi_turn_key"], kw["multi_turn_role_key"], kw["multi_turn_content_key"]}
    assert example[kw["multi_turn_role_key"]] is None and example[kw["multi_turn_content_key"]] is None
    messages = example[kw["multi_turn_key"]]
    if messages is None:
        raise LookupError(kw["multi_turn_key"] + " is None")
    return [{"type": m[kw["multi_turn_role_key"]], "content": [{"text": m[kw["multi_turn_content_key"]].strip()}]}
            for m in messages]
'''
CHAT_KWARGS = "{multi_turn_key: messages, multi_turn_role_key: role, multi_turn_content_key: content}"
CHATS = [
    {"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "Four."}]},
    {"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"},
                  {"role": "assistant", "content": " Paris. "}, {"role": "user", "content": "And of Italy?"},
                  {"role": "assistant", "content": "Rome."}]},
    {"id": 3, "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
]


def _chat_job(tmp: Path, hook: str, records: list) -> Path:
    (tmp / "in").mkdir(parents=True)
    (tmp / "in" / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = _config(tmp, hook, input_dir=tmp / "in")
    config.write_text(config.read_text().replace("{question_key: q, answer_key: a}", CHAT_KWARGS))
    assert _run(config) == 0
    return tmp / "out"


def test_own_hook_with_chat_kwargs_reads_keys_inside_messages_as_2_10(tmp_path):
    """multi_turn_role_key / multi_turn_content_key name keys inside the messages, not columns: a hook of the
    user's own given them uses every record (none was a missing_key dead letter), and its rows equal
    chat_read_hook's on the same records."""
    require_shared(QWEN)
    (tmp_path / "hooks.py").write_text(OWN_CHAT_HOOK)
    own = _chat_job(tmp_path / "own", f"{tmp_path / 'hooks.py'}:my_chat_hook", CHATS)
    builtin = _chat_job(tmp_path / "builtin", "chat_read_hook", CHATS)
    params = json.loads((own / "data_params.json").read_text())
    assert params["input"]["used"] == len(CHATS) and not params["input"].get("bad_by_reason")
    assert _dead_letters(own) == []
    rows = read_rows(own)
    assert len(rows) == len(CHATS)
    np.testing.assert_array_equal(rows, read_rows(builtin))


def test_own_hook_is_given_none_for_a_column_the_record_lacks(tmp_path):
    """As hook_columns says: a record lacking the multi_turn_key column, or holding null in it, reaches the hook
    with None there (here the hook raises on it: hook_raised); a record with none of the hook's columns is a
    missing_key dead letter. The other records are used."""
    require_shared(QWEN)
    (tmp_path / "hooks.py").write_text(OWN_CHAT_HOOK)
    records = [CHATS[0], {"conversation": CHATS[0]["messages"]}, {"messages": None}, CHATS[1]]
    out = _chat_job(tmp_path, f"{tmp_path / 'hooks.py'}:my_chat_hook", records)
    letters = _dead_letters(out)
    assert [(d["line"], d["reason"]) for d in letters] == [(2, "missing_key"), (3, "hook_raised")]
    assert letters[0]["detail"].startswith("none of the read hook's columns [")
    assert all(f"'{c}'" in letters[0]["detail"] for c in ("messages", "role", "content"))
    assert letters[1]["detail"] == "my_chat_hook raised LookupError: messages is None"
    params = json.loads((out / "data_params.json").read_text())
    assert params["input"]["used"] == 2
    assert params["input"]["bad_by_reason"] == {"missing_key": 1, "hook_raised": 1}


def test_own_hooks_columns_may_be_missing_builtin_hooks_columns_may_not(tmp_path):
    """The reader's side: a user's hook's columns (HookColumn) read as JSON null where a record lacks them or holds
    null, in .jsonl and .parquet alike; a record (a parquet file) with none of them is missing_key. The columns of
    a built-in hook run on its regions are JsonKeys, needed as before."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.config import load_config
    from transforms.core.records import BadRecord, HookColumn, JsonKey
    from transforms.io.readers import parquet_shape, read_records

    def values(path, keys):
        return [(r.reason, r.line) if type(r) is BadRecord else r.values for r in read_records(str(path), keys)]

    keys = tuple(HookColumn(k) for k in ("messages", "role", "content"))
    messages = CHATS[0]["messages"]
    text = json.dumps(messages)
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"messages": messages}, {"messages": None, "content": "c"}, {"other": 1}, {"messages": messages, "role": 7}]))
    assert values(path, keys) == [(text, "null", "null"), ("null", "null", '"c"'), ("missing_key", 3),
                                  (text, "7", "null")]
    assert values(path, tuple(map(JsonKey, ("messages", "role", "content"))))[0] == ("missing_key", 1)
    table = tmp_path / "a.parquet"
    pq.write_table(pa.table({"messages": [messages, None]}), table)
    assert values(table, keys) == [(text, "null", "null"), ("null", "null", "null")]
    assert parquet_shape(str(table), keys)[0] == 2  # planned by rows, as any parquet file
    assert parquet_shape(str(table), tuple(map(JsonKey, keys))) is None
    pq.write_table(pa.table({"other": [1]}), tmp_path / "b.parquet")
    [bad] = read_records(str(tmp_path / "b.parquet"), keys)
    assert type(bad) is BadRecord and bad.reason == "missing_key" and bad.line is None

    (tmp_path / "hooks.py").write_text(OWN_CHAT_HOOK)
    for hook, kind in ((f"{tmp_path / 'hooks.py'}:my_chat_hook", HookColumn),
                       ("prompt_completion_chat_read_hook", JsonKey)):
        (tmp_path / kind.__name__).mkdir()
        config = _config(tmp_path / kind.__name__, hook, input_dir=tmp_path)
        config.write_text(config.read_text().replace("{question_key: q, answer_key: a}", CHAT_KWARGS if
                                                     kind is HookColumn else "{prompt_key: q, completion_key: a}"))
        got = load_config(["--config", str(config)])[0].keys_tuple
        assert [type(k) for k in got] == [kind] * len(got), hook
