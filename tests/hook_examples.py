"""Read hooks of a user's own, for tests/test_read_hooks.py: importable as `tests.hook_examples:<name>`.

Each is a Cerebras 2.10 read hook: `hook(example, **read_hook_kwargs)` -> a semantic data array.
"""


def qa_regions(example, **kwargs):
    """A system turn, a user turn whose second region is dropped, and an assistant turn whose first region
    carries no loss: the rows train only the answer (and its end of turn)."""
    question, answer = example[kwargs["question_key"]], example[kwargs["answer_key"]]
    if question == "boom":
        raise RuntimeError("the hook exploded")
    if question == "bad":
        return [{"type": "user", "content": "not a list of parts"}]
    return [
        {"type": "system", "content": [{"text": "Answer briefly."}]},
        {"type": "user", "content": [{"text": question}, {"text": " [internal note]"}],
         "semantic_drop_mask": [False, True]},
        {"type": "assistant", "content": [{"text": "Answer: "}, {"text": answer}], "semantic_loss_weight": [0, 1]},
    ]


def attention_masked(example, **kwargs):
    """One region whose attention is masked."""
    return [
        {"type": "user", "content": [{"text": example[kwargs["question_key"]]}], "semantic_attention_mask": [0]},
        {"type": "assistant", "content": [{"text": example[kwargs["answer_key"]]}]},
    ]


def messages_as_regions(example, **kwargs):
    """chat_read_hook's rows by hand: one region per message, roles as types (the default weights)."""
    messages = example[kwargs["messages_key"]]
    if len(messages) % 2:
        return []
    return [{"type": m["role"], "content": [{"text": m["content"].strip()}]} for m in messages]


def text_pairs(example, **kwargs):
    """Prompt/completion regions (no chat template): the prompt untrained, the completion trained."""
    return [{"type": "prompt", "content": [{"text": example[kwargs["question_key"]]}]},
            {"type": "completion", "content": [{"text": " " + example[kwargs["answer_key"]]}]}]


def title_and_body(example, **kwargs):
    """Pretraining: a document made of two columns (2.10's way to bring any layout)."""
    title, body = example[kwargs["title_key"]], example[kwargs["body_key"]]
    if title == "draft":
        return [{"content": [{"text": title}]}, {"content": [{"text": body}]}]  # both trained (text: weight 1)
    return [{"content": [{"text": title + "\n\n"}, {"text": body}],
             "semantic_loss_weight": [1, 0 if title == "untrained" else 1]}]


def preference(example, **kwargs):
    """DPO: a system and a user turn, then the chosen and the rejected response."""
    if example[kwargs["question_key"]] == "no answer":
        return [{"type": "user", "content": [{"text": "no answer"}]}]
    return [{"type": "system", "content": [{"text": "Answer briefly."}]},
            {"type": "user", "content": [{"text": example[kwargs["question_key"]]}]},
            {"type": "chosen", "content": [{"text": example[kwargs["answer_key"]]}]},
            {"type": "rejected", "content": [{"text": "I do not know."}]}]
