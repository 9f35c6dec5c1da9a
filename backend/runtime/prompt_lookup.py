"""Prompt lookup's drafts, its settings sweep and its tuning (pure Python: no torch here).

Prompt lookup (transformers' `prompt_lookup_num_tokens`) drafts the tokens that followed the last
n-gram's earlier occurrence in prompt + output, and checks them in one forward. Its two knobs are
the n-gram size (transformers' `max_ngram_size`, default 2) and the draft length
(`num_pred_tokens`, default 10). A user would tune them, so the comparison here does too:

    SWEEP                      n-gram 1-4 x draft 10, 16, 32, 64, 128 (20 settings)
    reference_forwards         the forwards a reference replay with one setting runs (tokens each,
                               and the context before each), counted without the model: acceptance
                               depends on the target only (`reference_forward_sizes`: tokens only)
    dev_split                  a deterministic dev / rest split of case ids (tune on dev, report rest)
    fastest                    the setting with the least measured seconds

Why simulate: in reference mode a draft is kept while it matches the target, so which forwards run
is known before running any; a sweep of 20 settings then needs the model only for the few
settings worth timing (see `backend.cli.bench_command`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence


@dataclass(frozen=True, order=True)
class PromptLookupSetting:
    ngram: int    # largest n-gram matched (then smaller ones, down to 1)
    drafts: int   # most draft tokens checked per forward

    @property
    def label(self) -> str:
        return f"{self.ngram}-gram/{self.drafts}"


DEFAULT_SETTING = PromptLookupSetting(2, 10)  # transformers' defaults
# The peer tuned: the fastest setting of SWEEP on held-out real commit edits (`python -m backend bench
# commits`, SmolLM2, this repository's CPU; docs/results.md). The app's Compare tab runs it beside the
# defaults; `--lookup` overrides it everywhere.
TUNED_SETTING = PromptLookupSetting(3, 64)
DEFAULT_LOOKUP = (DEFAULT_SETTING.ngram, DEFAULT_SETTING.drafts)  # the (n-gram, drafts) pairs requests carry
TUNED_LOOKUP = (TUNED_SETTING.ngram, TUNED_SETTING.drafts)
MAX_NGRAM = 8      # larger n-grams almost never recur verbatim; a request beyond these is refused
MAX_DRAFTS = 256
NGRAM_SIZES = (1, 2, 3, 4)
DRAFT_LENGTHS = (10, 16, 32, 64, 128)
SWEEP = tuple(PromptLookupSetting(n, k) for n in NGRAM_SIZES for k in DRAFT_LENGTHS)


def lookup_label(lookup: tuple[int, int]) -> str:
    """(3, 64) -> "3-gram/64", the form `parse_setting` reads back."""
    return PromptLookupSetting(*lookup).label


def parse_setting(text: str) -> PromptLookupSetting:
    """'3-gram/64' or '3/64' -> PromptLookupSetting(3, 64); ValueError with the expected form."""
    head, sep, tail = text.strip().partition("/")
    head = head.removesuffix("-gram")
    if not sep or not head.isdigit() or not tail.isdigit() or int(head) < 1 or int(tail) < 1:
        raise ValueError(f"prompt lookup setting {text!r}: expected N-gram/K or N/K with positive N, K (e.g. 3-gram/64)")
    return PromptLookupSetting(int(head), int(tail))


def prompt_lookup_candidates(
    ids: Sequence[int], *, max_ngram_size: int = 2, num_pred_tokens: int = 10, eos_ids: Sequence[int] = ()
) -> list[int]:
    """Drafts as transformers' PromptLookupCandidateGenerator.get_candidates (5.24) proposes them.

    For n = max_ngram_size .. 1: find the first (left-to-right) earlier occurrence of the last n
    tokens that has a continuation; propose up to num_pred_tokens tokens that followed it, cut
    before the first EOS. [] when nothing matches. Rejects sizes <= 0 (ValueError).
    """
    if max_ngram_size <= 0 or num_pred_tokens <= 0:
        raise ValueError("max_ngram_size and num_pred_tokens must be positive")
    ids = list(ids)
    n = len(ids)
    for size in range(min(max_ngram_size, n - 1), 0, -1):
        tail = ids[n - size:]
        start = -1
        while True:
            try:  # a match starting at n - size has no continuation: search before it
                start = ids.index(tail[0], start + 1, n - size)
            except ValueError:
                break
            if ids[start:start + size] == tail:
                return _until_eos(ids[start + size:min(start + size + num_pred_tokens, n)], eos_ids)
    return []


def _until_eos(drafts: list[int], eos_ids: Sequence[int]) -> list[int]:
    """The drafts cut before the first EOS (a draft never proposes ending the output)."""
    for i, token in enumerate(drafts):
        if token in eos_ids:
            return drafts[:i]
    return drafts


class NgramIndex:
    """`prompt_lookup_candidates` for a sequence that only grows, without rescanning it per call.

    Keeps the first (left-to-right) start of every n-gram (n <= max_ngram_size) seen so far, in
    O(max_ngram_size) per appended token. The drafts are the scan's: an n-gram's first occurrence
    never moves as the sequence grows, and it has a continuation iff it starts before the tail.
    Why: counting a sweep's forwards on long files (29 stdlib files, 79k target tokens, 20
    settings) rescanned prompt + output before every forward and took most of an hour.
    """

    def __init__(self, max_ngram_size: int, ids: Iterable[int] = ()) -> None:
        if max_ngram_size <= 0:
            raise ValueError("max_ngram_size must be positive")
        self.max_ngram_size = max_ngram_size
        self.ids: list[int] = []
        self._first: dict[tuple[int, ...], int] = {}
        self.extend(ids)

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.ids.append(int(token))
            end = len(self.ids)
            for size in range(1, min(self.max_ngram_size, end) + 1):
                self._first.setdefault(tuple(self.ids[end - size:end]), end - size)

    def candidates(self, num_pred_tokens: int, eos_ids: Sequence[int] = ()) -> list[int]:
        """What prompt_lookup_candidates(self.ids, ...) returns."""
        if num_pred_tokens <= 0:
            raise ValueError("num_pred_tokens must be positive")
        ids, n = self.ids, len(self.ids)
        for size in range(min(self.max_ngram_size, n - 1), 0, -1):
            start = self._first.get(tuple(ids[n - size:]))
            if start is not None and start < n - size:
                return _until_eos(ids[start + size:min(start + size + num_pred_tokens, n)], eos_ids)
        return []


def reference_forwards(
    prompt_ids: Sequence[int], target_ids: Sequence[int], setting: PromptLookupSetting, *, eos_ids: Sequence[int] = ()
) -> list[tuple[int, int]]:
    """(tokens, context) of each forward that `baselines.replay_prompt_lookup` runs after the prompt
    prefill: its length and the tokens already in the cache before it.

    Mirrors its loop: the cache holds prompt + output[:-1]; each forward carries the pending last
    output token plus the drafts (1 + k tokens) and keeps the drafts that match the target; the
    replay ends with the forward after the last target token.
    """
    prompt, target = [int(t) for t in prompt_ids], [int(t) for t in target_ids]
    if not target:
        return []
    forwards: list[tuple[int, int]] = []
    produced = 1  # the prefill's logits choose target[0]
    index = NgramIndex(setting.ngram, prompt + target[:produced])  # prompt + output so far
    while produced < len(target) + 1:
        drafts = index.candidates(setting.drafts, eos_ids)
        hits = 0
        for i, proposed in enumerate(drafts):
            if produced + i >= len(target) or target[produced + i] != proposed:
                break
            hits += 1
        forwards.append((1 + len(drafts), len(prompt) + produced - 1))
        index.extend(target[produced:produced + hits + 1])
        produced += hits + 1
    return forwards


def reference_forward_sizes(
    prompt_ids: Sequence[int], target_ids: Sequence[int], setting: PromptLookupSetting, *, eos_ids: Sequence[int] = ()
) -> list[int]:
    """Tokens in each forward of `reference_forwards`."""
    return [tokens for tokens, _context in reference_forwards(prompt_ids, target_ids, setting, eos_ids=eos_ids)]


def predicted_seconds(forwards: Iterable[tuple[int, int]], forward_seconds: Callable[[int, int], float]) -> float:
    """Seconds of these (tokens, context) forwards by a model of one forward's seconds."""
    return sum(forward_seconds(tokens, context) for tokens, context in forwards)


def dev_split(case_ids: Sequence[str], *, dev_fraction: float = 1 / 3) -> tuple[list[str], list[str]]:
    """(dev, rest): the ids whose SHA-1 ranks in the first `dev_fraction` form dev (at least one),
    the others the rest (at least one when there are two or more ids). Same ids -> same split."""
    if not 0 < dev_fraction < 1:
        raise ValueError("dev_fraction must be between 0 and 1")
    ranked = sorted(case_ids, key=lambda case_id: hashlib.sha1(case_id.encode("utf-8")).hexdigest())
    size = max(1, round(len(ranked) * dev_fraction)) if ranked else 0
    if len(ranked) >= 2:
        size = min(size, len(ranked) - 1)
    dev = set(ranked[:size])
    return [c for c in case_ids if c in dev], [c for c in case_ids if c not in dev]


def fastest(seconds: Mapping[PromptLookupSetting, float]) -> PromptLookupSetting:
    """The setting with the least seconds (ties: the smaller n-gram, then fewer drafts)."""
    if not seconds:
        raise ValueError("no timed setting to choose from")
    return min(seconds, key=lambda setting: (seconds[setting], setting))
