"""Semantic data arrays: what a Cerebras 2.10 read hook returns, checked and flattened into regions.

Model Zoo 2.10's `preprocess_data.py` reads every record through a *read
hook* (`hook(example, **read_hook_kwargs)`), which returns a *semantic data
array*: a list of turns,

    [{"type": "user", "content": [{"text": "Hi"}]},
     {"type": "assistant", "content": [{"text": "Hello"}, {"text": " there"}],
      "semantic_loss_weight": [1, 0]}]

`type` is a role (absent from `text_read_hook`'s turns: plain text);
`content` is a list of parts, each a one-key dict {region_key: value}; the
optional per-turn lists `semantic_loss_weight`, `semantic_drop_mask` and
`semantic_attention_mask` hold one entry per part. Every part is a *region*
of the text that gets its own loss weight.

Why this module exists: the hook is user code, so its result is untrusted
input. 2.10 checks it loosely and fails in the middle of a job (a wrong mask
length raises and ends the process's remaining files), or silently (a 0.5
weight is cast to 0, an empty part skips the record with only a log line).
Here every defect of one record is a `RegionError` with a `reason` (the
dead-letter reason and counter name) and a `detail` naming the turn and
part, so one bad record is one dead letter and the job goes on.

`read_semantic_array` gives the regions in order, with their weights
resolved; `conversation` joins them into chat messages (exactly as 2.10
joins a turn's parts) and says where each part sits in its message;
`region_token_weights` turns character spans into per-token weights once the
rendered text is tokenized. Only text parts are supported: an image part
(multimodal) is refused. Any part key other than "image" is a text region
named by its key, as in 2.10 (the config maps are keyed by it).

Pure: no Beam, no files.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

__all__ = ["REGION_TYPES", "DEFAULT_LOSS_WEIGHTS", "Region", "RegionDefaults", "RegionError", "conversation",
           "is_chat", "read_semantic_array", "region_token_weights"]

# The turn types a semantic data array may use. "text" stands for a turn without a type (text_read_hook);
# "context" is nlg_read_hook's prompt side (transforms.core.hooks210).
REGION_TYPES = ("system", "user", "assistant", "prompt", "completion", "text", "chosen", "rejected", "context")

# Loss weight of a region whose turn and config say nothing. None: 1 when pretraining, else 0 (plain text is
# what pretraining learns; in finetuning, text that is no answer is context).
DEFAULT_LOSS_WEIGHTS: Mapping[str, Optional[int]] = {
    "system": 0, "user": 0, "prompt": 0, "context": 0,
    "assistant": 1, "completion": 1, "chosen": 1, "rejected": 1,
    "text": None,
}

# First turn types of a conversation that is not a chat: it is text, not messages for a chat template.
_NOT_CHAT = frozenset({"prompt", "completion", "context", "text"})

_IMAGE = "image"
_INCLUDE_TAGS = "include_tags"
_LISTS = ("semantic_loss_weight", "semantic_drop_mask", "semantic_attention_mask")
_INT32_MAX = 2**31 - 1  # masks are written as int32


class RegionError(ValueError):
    """Why a record's semantic data array gives no regions: `reason` is a short counter name, `detail` says more.

    Reasons: not_a_semantic_array, empty_array, unknown_region_type,
    image_region, region_not_text, empty_region, mask_length,
    bad_loss_weight, bad_mask_value; the built-in hooks
    (transforms.core.hooks210) add their own (unpaired_turns,
    no_assistant_marker, ...).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail

    def __reduce__(self):
        # Pickled across processes (a runner's dead-letter output): keep both fields, not the joined message.
        return RegionError, (self.reason, self.detail)


@dataclasses.dataclass(frozen=True)
class Region:
    """One text part of a turn, with its weights resolved.

    `kind` is the turn's type ("text" when it had none); `text` the part's
    text (between `<key>` tags when the part asked for `include_tags`);
    `turn` and `part` its indices in the hook's array (a dropped part leaves
    a gap); `key` the part's region key ("text" but for custom hooks).
    """

    kind: str
    text: str
    loss_weight: int
    attend: bool
    turn: int
    part: int
    key: str = "text"


@dataclasses.dataclass(frozen=True)
class RegionDefaults:
    """The config's say on regions: 2.10's `processing.semantic_loss_weight`, `semantic_drop_mask`,
    `semantic_attention_mask`, each a map region key -> value (e.g. {"text": 0}), and the mode.

    The maps are keyed by the *part key* ("text", "image"), not by the
    turn's role, as in 2.10: {"text": 1} trains every text region, prompts
    included. A turn's own list, when it has one, wins over the map.

    Values are checked here (a ValueError names the field): weights whole
    numbers >= 0, masks true/false (or 0/1).
    """

    semantic_loss_weight: Mapping[str, int] = dataclasses.field(default_factory=dict)
    semantic_drop_mask: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    semantic_attention_mask: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    pretraining: bool = False

    def __post_init__(self) -> None:
        for name, check in (("semantic_loss_weight", _loss_weight_value), ("semantic_drop_mask", _mask_value),
                            ("semantic_attention_mask", _mask_value)):
            given = getattr(self, name)
            if given is None:
                given = {}
            if not isinstance(given, Mapping):
                raise ValueError(f"processing.{name} must be a map of region key -> value, not {_kind(given)}")
            checked = {}
            for key, value in given.items():
                if not isinstance(key, str):
                    raise ValueError(f"processing.{name}: key {key!r} is not a region key (a string)")
                ok, norm = check(value)
                if not ok:
                    raise ValueError(f"processing.{name}[{key!r}]: {value!r} is not {norm}")
                checked[key] = norm
            object.__setattr__(self, name, checked)  # a plain dict: pickles, unlike a mapping proxy
        object.__setattr__(self, "pretraining", bool(self.pretraining))

    @classmethod
    def from_processing(cls, processing: Mapping[str, Any], *, pretraining: bool) -> "RegionDefaults":
        """From a 2.10 config's `processing` section (the three keys are optional)."""
        return cls(**{name: processing.get(name) or {} for name in _LISTS}, pretraining=pretraining)


def read_semantic_array(value: Any, defaults: Optional[RegionDefaults] = None) -> tuple[Region, ...]:
    """Check a read hook's result and flatten it into its regions, in order (`defaults` None: finetuning,
    no config maps).

    A part whose drop mask is true is left out (a turn may lose all its
    parts); its region's weights are still checked. Weights:

    - loss weight: the turn's `semantic_loss_weight` entry, else the
      config's `semantic_loss_weight[key]`, else DEFAULT_LOSS_WEIGHTS of the
      turn's type (text: 1 when `defaults.pretraining`, else 0);
    - attend: the turn's `semantic_attention_mask` entry, else the config's,
      else True.

    An empty or null part: in finetuning the record is refused
    (RegionError("empty_region"); 2.10 skips such a record, counting it in
    raw_docs_skipped, even when the part would be dropped); in pretraining
    the part is left out, as 2.10 does, and only a record left with no
    region is refused. Raises RegionError (see its reasons); never returns
    an empty tuple.

    >>> read_semantic_array([{"type": "user", "content": [{"text": "Hi"}]},
    ...                      {"type": "assistant", "content": [{"text": "Yo"}]}])[1]
    Region(kind='assistant', text='Yo', loss_weight=1, attend=True, turn=1, part=0, key='text')
    """
    if defaults is None:
        defaults = RegionDefaults()
    if not isinstance(value, (list, tuple)):
        raise RegionError("not_a_semantic_array", f"the read hook returned {_kind(value)}, not a list of turns")
    if not value:
        raise RegionError("empty_array", "the read hook returned no turns")
    regions = []
    empties = 0
    for t, turn in enumerate(value):
        if not isinstance(turn, Mapping):
            raise RegionError("not_a_semantic_array", f"turn {t} is {_kind(turn)}, not a dict")
        kind = _turn_type(turn, t)
        content = turn.get("content")
        if not isinstance(content, (list, tuple)):
            raise RegionError("not_a_semantic_array",
                              f"turn {t} ({kind}): content is {_kind(content)}, not a list of parts")
        weights, drops, attends = (_turn_list(turn, name, t, kind, len(content), check)
                                   for name, check in zip(_LISTS, (_loss_weight_value, _mask_value, _mask_value)))
        for p, part in enumerate(content):
            key, text, tags = _part(part, t, p, kind)
            if text is None or text == "":
                if not defaults.pretraining:
                    raise RegionError("empty_region", f"turn {t} ({kind}), part {p}: the {key!r} part is "
                                      f"{'null' if text is None else 'empty'}")
                empties += 1
                continue
            drop = drops[p] if drops is not None else defaults.semantic_drop_mask.get(key, False)
            if drop:
                continue
            if weights is not None:
                weight = weights[p]
            elif key in defaults.semantic_loss_weight:
                # 2.10 tests the configured weight for truth, so a configured 0 falls back to the default (1 for
                # an assistant turn). We honour it: {"text": 0} means no loss on text regions.
                weight = defaults.semantic_loss_weight[key]
            else:
                weight = DEFAULT_LOSS_WEIGHTS[kind]
                if weight is None:
                    weight = 1 if defaults.pretraining else 0
            attend = attends[p] if attends is not None else defaults.semantic_attention_mask.get(key, True)
            if tags:
                # 2.10's tags: <|key|>...<|key|> in pretraining, <key>...</key> in finetuning.
                text = f"<|{key}|>{text}<|{key}|>" if defaults.pretraining else f"<{key}>{text}</{key}>"
            regions.append(Region(kind, text, weight, attend, t, p, key))
    if not regions:
        if empties:
            raise RegionError("empty_region", "every part of the record is empty or null")
        raise RegionError("empty_array", "every part of the record is dropped (semantic_drop_mask)")
    return tuple(regions)


def is_chat(regions: Sequence[Region]) -> bool:
    """Whether the regions are messages for a chat template (2.10's rule): not when the first is a prompt or a
    completion, nor nlg's context, nor plain text. Those are joined as text instead."""
    return bool(regions) and regions[0].kind not in _NOT_CHAT


def conversation(regions: Sequence[Region]) -> tuple[list[dict], list[list[tuple[int, int]]]]:
    """Messages for a chat template, and where each region sits in its message's content.

    One message per turn that kept a region, `{"role": kind, "content": the
    turn's region texts joined}` (2.10 joins a turn's parts with nothing in
    between); `part_spans[m]` holds the (start, end) characters of each of
    message m's regions in its content, in order.

    >>> conversation(read_semantic_array([{"type": "user", "content": [{"text": "a"}, {"text": "bc"}]}]))
    ([{'role': 'user', 'content': 'abc'}], [[(0, 1), (1, 3)]])
    """
    messages: list[dict] = []
    spans: list[list[tuple[int, int]]] = []
    texts: list[str] = []
    turn = None
    for region in regions:
        if region.turn != turn:
            if texts:
                messages[-1]["content"] = "".join(texts)
            turn, texts, at = region.turn, [], 0
            messages.append({"role": region.kind, "content": ""})
            spans.append([])
        spans[-1].append((at, at + len(region.text)))
        at += len(region.text)
        texts.append(region.text)
    if texts:
        messages[-1]["content"] = "".join(texts)
    return messages, spans


def region_token_weights(offsets: Any, spans_with_weights: Iterable[tuple[int, int, int]], n_tokens: int) -> np.ndarray:
    """Per-token weights (int32, length n_tokens) from character spans of the tokenized text.

    `offsets` are the tokenizer's (start, end) characters of each token,
    shape [n_tokens, 2]; `spans_with_weights` holds (start, end, weight)
    character spans. A token takes the weight of a span it overlaps
    (start < span end and end > span start: a token straddling a span's edge
    is in it, as in 2.10); where spans share a token the later one wins, as
    in 2.10; a token in no span weighs 0. An empty span covers nothing.

    >>> region_token_weights([[0, 2], [2, 5], [5, 6]], [(0, 3, 0), (3, 6, 1)], 3).tolist()
    [0, 1, 1]
    """
    out = np.zeros(n_tokens, dtype=np.int32)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if len(offsets) != n_tokens:
        raise ValueError(f"{len(offsets)} token offsets for {n_tokens} tokens")
    spans = np.asarray(list(spans_with_weights), dtype=np.int64).reshape(-1, 3)
    spans = spans[spans[:, 1] > spans[:, 0]]
    if n_tokens == 0 or len(spans) == 0:
        return out
    starts, ends = offsets[:, 0], offsets[:, 1]
    if np.all(starts[1:] >= starts[:-1]) and np.all(ends[1:] >= ends[:-1]):
        # Offsets in order (the usual case): each span's tokens are one slice, found by binary search.
        lo = np.searchsorted(ends, spans[:, 0], side="right")  # first token ending after the span's start
        hi = np.searchsorted(starts, spans[:, 1], side="left")  # first token starting at or after its end
        for a, b, w in zip(lo.tolist(), hi.tolist(), spans[:, 2].tolist()):
            out[a:b] = w
    else:
        # Offsets out of order (a special token the post-processor adds at (0, 0) after the text): per span.
        for a, b, w in spans.tolist():
            out[(starts < b) & (ends > a)] = w
    return out


def _turn_type(turn: Mapping, t: int) -> str:
    kind = turn.get("type")
    if kind is None:
        return "text"
    if not isinstance(kind, str) or kind not in REGION_TYPES:
        raise RegionError("unknown_region_type",
                          f"turn {t}: type {kind!r} is not one of {', '.join(REGION_TYPES)}")
    return kind


def _turn_list(turn: Mapping, name: str, t: int, kind: str, n_parts: int, check) -> Optional[list]:
    given = turn.get(name)
    if given is None:
        return None
    if not isinstance(given, (list, tuple)):
        raise RegionError("not_a_semantic_array", f"turn {t} ({kind}): {name} is {_kind(given)}, not a list")
    if len(given) != n_parts:
        raise RegionError("mask_length", f"turn {t} ({kind}): {name} has {len(given)} entries for {n_parts} parts")
    values = []
    for p, value in enumerate(given):
        ok, norm = check(value)
        if not ok:
            reason = "bad_loss_weight" if name == "semantic_loss_weight" else "bad_mask_value"
            raise RegionError(reason, f"turn {t} ({kind}), part {p}: {name} {value!r} is not {norm}")
        values.append(norm)
    return values


def _part(part: Any, t: int, p: int, kind: str) -> tuple[str, Any, bool]:
    """(region key, value, include_tags) of a content part."""
    where = f"turn {t} ({kind}), part {p}"
    if not isinstance(part, Mapping):
        raise RegionError("not_a_semantic_array", f"{where} is {_kind(part)}, not a one-key dict")
    tags = part.get(_INCLUDE_TAGS, False)
    keys = [k for k in part if k != _INCLUDE_TAGS]
    if len(keys) != 1 or not isinstance(keys[0], str):
        raise RegionError("not_a_semantic_array", f"{where} has keys {list(part)!r}, not one region key")
    if not isinstance(tags, (bool, np.bool_)):
        raise RegionError("not_a_semantic_array", f"{where}: include_tags {tags!r} is not true or false")
    key = keys[0]
    value = part[key]
    if key == _IMAGE:
        raise RegionError("image_region", f"{where} is an image: multimodal data is not supported")
    if value is not None and not isinstance(value, str):
        raise RegionError("region_not_text", f"{where}: the {key!r} part is {_kind(value)}, not text")
    return key, value, bool(tags)


def _loss_weight_value(value: Any) -> tuple[bool, Any]:
    """(ok, the weight as an int) or (False, what it should be)."""
    should = "a whole number >= 0 (masks are int32)"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return False, should
    value = float(value) if not isinstance(value, numbers.Integral) else int(value)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return False, should
        value = int(value)
    if not 0 <= value <= _INT32_MAX:
        return False, should
    return True, value


def _mask_value(value: Any) -> tuple[bool, Any]:
    if isinstance(value, (bool, np.bool_)):
        return True, bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return True, bool(value)
    return False, "true or false (or 0 or 1)"


def _kind(value: Any) -> str:
    """How a detail names a value's type."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"
