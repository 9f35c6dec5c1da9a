"""`TokenVocabulary`: a tokenizer's token texts indexed for the token FSM's mask search
(`backend.core.fsm`); built once per tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional


class TokenVocabulary:
    """Token texts indexed for prefix search; built once per tokenizer.

    `texts[i]` is token i's text, None for a token never allowed (special tokens). Empty texts are
    never allowed either. `eos_id`'s text is ignored. `token_bytes`, if given, holds each token's
    raw bytes, used to make gen text exact where a token's text holds U+FFFD (a split character).
    Rejects an `eos_id` outside the vocabulary and a `token_bytes` of another length (ValueError).
    """

    def __init__(
        self,
        texts: Sequence[Optional[str]],
        eos_id: int,
        *,
        token_bytes: Optional[Sequence[Optional[bytes]]] = None,
    ) -> None:
        if not 0 <= eos_id < len(texts):
            raise ValueError(f"eos_id {eos_id} outside a vocabulary of {len(texts)} tokens")
        if token_bytes is not None and len(token_bytes) != len(texts):
            raise ValueError(f"token_bytes has {len(token_bytes)} entries, texts {len(texts)}")
        self.texts: tuple[Optional[str], ...] = tuple(texts)
        self.eos_id = eos_id
        self.token_bytes = tuple(token_bytes) if token_bytes is not None else None
        by_text: dict[str, list[int]] = {}
        for token_id, text in enumerate(self.texts):
            if text and token_id != eos_id:
                by_text.setdefault(text, []).append(token_id)
        self.sorted_texts: list[str] = sorted(by_text)
        self.ids_by_text: dict[str, tuple[int, ...]] = {t: tuple(v) for t, v in by_text.items()}
        # Gen TEXT: tokens without '>' never finish '</gen>' (see backend.core.fsm's docstring).
        self.gt_texts: list[str] = [t for t in self.sorted_texts if ">" in t]
        gt = set(self.gt_texts)
        self.no_gt_ids: tuple[int, ...] = tuple(
            sorted(i for t, ids in self.ids_by_text.items() if t not in gt for i in ids)
        )

    def __len__(self) -> int:
        return len(self.texts)
