"""A Cerebras 2.10 custom tokenizer for tests (`custom_tokenizer: tests.tokenizer_examples:WrappedTokenizer`),
built like 2.10's custom_tokenizer_example/CustomLlama3Tokenizer.py: a class around a Hugging Face fast
tokenizer that forwards what it does not define, with its own EOS and pad ids."""

from typing import Any, Optional


class WrappedTokenizer:
    def __init__(self, pretrained_model_name_or_path: str, eos_token_id: Optional[int] = None,
                 pad_token_id: Optional[int] = None, **kwargs: Any):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path, **kwargs)
        self.eos_token_id = eos_token_id if eos_token_id is not None else self.tokenizer.eos_token_id
        self.pad_token_id = pad_token_id if pad_token_id is not None else self.eos_token_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)

    def __len__(self) -> int:
        return len(self.tokenizer)


class NotATokenizer:
    def __init__(self, **kwargs: Any):
        pass
