"""Several training examples of one window in one forward: their shared prompt is computed once.

A training sequence is the prompt (system, the numbered input, the instruction) and the answer. The
numbered input is most of it (median 560 of ~900 tokens on the 20k set), and the edits of one window
(`make-data --edits-per-window K`) share it up to their instructions. Packed, the shared prefix comes
once and each example's own tokens (instruction, answer) follow it as a branch:

    positions    0 .. p-1 | p .. p+len1-1 | p .. p+len2-1 | ...
    tokens       prefix   | branch 1      | branch 2      | ...
    attends to   causal   | prefix + its own earlier tokens (never another branch)

Each branch token sees exactly the tokens it sees unpacked, at the same positions (rotary
embeddings depend on the position alone), so every label gets the same logits and the loss and its
gradient equal the unpacked ones (tests/test_packing.py checks both against the unpacked forwards).
A label whose predicting position lies in the prefix reads the prefix's logits.

`group_runs` decides which examples of a batch share a forward (same `Example.prefix_key`, at most
`limit`); `pack` lays them out (no torch here); `packed_forward` runs a `Packed` (the prefix once,
then each branch over the prefix's keys and values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from backend.training.examples import IGNORE, Example


@dataclass(frozen=True)
class Packed:
    """Examples laid out as one sequence: the shared prefix, then each example's own tokens.

    `branches`: [start, end) of each example's own tokens in the packed sequence; `predict_at[i]`
    is the packed position whose logits predict `targets[i]`; `owner[i]` is the index (into
    `examples`) of the example that label belongs to."""

    examples: tuple[Example, ...]
    input_ids: tuple[int, ...]
    position_ids: tuple[int, ...]
    prefix: int
    branches: tuple[tuple[int, int], ...]
    predict_at: tuple[int, ...]
    targets: tuple[int, ...]
    owner: tuple[int, ...]


def common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """The length of the longest token prefix all `sequences` share."""
    if not sequences:
        return 0
    shortest = min(len(s) for s in sequences)
    length = 0
    while length < shortest and all(s[length] == sequences[0][length] for s in sequences):
        length += 1
    return length


def pack(examples: Sequence[Example]) -> Packed:
    """Lay out `examples` (usually sharing a prompt) as one packed sequence (see the module docstring)."""
    if not examples:
        raise ValueError("nothing to pack")
    p = common_prefix([e.input_ids for e in examples])
    ids, positions = list(examples[0].input_ids[:p]), list(range(p))
    branches, predict_at, targets, owner = [], [], [], []
    for index, example in enumerate(examples):
        start = len(ids)
        ids += example.input_ids[p:]
        positions += range(p, len(example.input_ids))
        branches.append((start, len(ids)))
        for i, label in enumerate(example.labels):
            if label == IGNORE or i == 0:
                continue
            source = i - 1  # the position whose logits predict token i
            predict_at.append(source if source < p else start + source - p)
            targets.append(label)
            owner.append(index)
    return Packed(tuple(examples), tuple(ids), tuple(positions), p, tuple(branches), tuple(predict_at),
                  tuple(targets), tuple(owner))


def group_runs(batch: Sequence[Example], limit: int) -> list[list[Example]]:
    """`batch` cut into runs of consecutive examples with the same prefix key, at most `limit`
    each (an example without a key is a run of its own). The trainer packs each run."""
    runs: list[list[Example]] = []
    for example in batch:
        last = runs[-1] if runs else None
        if (last is not None and len(last) < limit and example.prefix_key
                and last[-1].prefix_key == example.prefix_key):
            last.append(example)
        else:
            runs.append([example])
    return runs


def gather_by_key(order: Sequence[int], keys: Sequence[str]) -> list[int]:
    """`order` (example indices) with the examples of one prefix key moved together, where the
    key first appears; keyless examples stay where they are. Seeded shuffles stay seeded."""
    slots: dict[str, list[int]] = {}
    sequence: list[list[int]] = []
    for index in order:
        key = keys[index]
        if not key:
            sequence.append([index])
        elif key in slots:
            slots[key].append(index)
        else:
            slots[key] = [index]
            sequence.append(slots[key])
    return [index for group in sequence for index in group]
