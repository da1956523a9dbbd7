"""Chat and DPO modes, the pure part: templates, tokens with a loss mask, rows.

One idea per module, each importing only the ones above it:

- `template`: chat templates rendered exactly as transformers renders them
  (`ChatRenderer`), the template and its special-token strings from a
  tokenizer_config.json dict, `ChatError` (a record's drop reason).
- `encode`: messages -> token ids (special-token text in a message is plain
  text) and the trained tokens (`ChatEncoder`), `parse_conversation`.
- `rows`: the 3-row chat layout (`chat_row`) and `truncate`.
- `dpo`: DPO records -> prompt and response tokens -> the 6-row layout.
"""

from transforms.core.chat.dpo import DPO_FEATURES, DpoExample, EncodedDpo, dpo_example, dpo_row, encode_dpo
from transforms.core.chat.encode import ChatEncoder, EncodedChat, TokenizedChat, Turn, parse_conversation
from transforms.core.chat.rows import KEEP_END, KEEP_START, TRUNCATION_MODES, chat_row, truncate
from transforms.core.chat.template import (
    CHATML,
    ChatError,
    ChatRenderer,
    Rendering,
    template_from_config,
    template_tokens,
)

__all__ = [
    "CHATML",
    "ChatError",
    "ChatRenderer",
    "Rendering",
    "template_from_config",
    "template_tokens",
    "ChatEncoder",
    "EncodedChat",
    "TokenizedChat",
    "Turn",
    "parse_conversation",
    "KEEP_START",
    "KEEP_END",
    "TRUNCATION_MODES",
    "chat_row",
    "truncate",
    "DPO_FEATURES",
    "DpoExample",
    "EncodedDpo",
    "dpo_example",
    "encode_dpo",
    "dpo_row",
]
