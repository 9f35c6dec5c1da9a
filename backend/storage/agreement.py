"""Inter-annotator agreement: Cohen's kappa for two annotators labelling the same items. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Agreement:
    n: int                 # items both annotators labelled
    observed: float | None  # p_o, fraction of items with the same label
    expected: float | None  # p_e, agreement expected by chance from each annotator's label rates
    kappa: float | None    # (p_o - p_e) / (1 - p_e); None when undefined (no items, or p_e == 1)

    def describe(self) -> str:
        if self.n == 0:
            return "no edits labelled by both annotators yet"
        if self.kappa is None:
            return f"kappa undefined on {self.n} shared edits (both used one single label); agreement {self.observed:.0%}"
        return f"Cohen's kappa = {self.kappa:.3f} on {self.n} shared edits (observed {self.observed:.0%}, chance {self.expected:.0%})"


def cohen_kappa(labels_a: Sequence[str], labels_b: Sequence[str]) -> Agreement:
    """Cohen's kappa of two equal-length label sequences (item i labelled by A and by B).

    Rejects sequences of different lengths (ValueError). Labels are any hashable strings;
    categories used by only one annotator count with rate 0 for the other.
    """
    if len(labels_a) != len(labels_b):
        raise ValueError(f"label sequences differ in length: {len(labels_a)} vs {len(labels_b)}")
    n = len(labels_a)
    if n == 0:
        return Agreement(0, None, None, None)
    observed = sum(a == b for a, b in zip(labels_a, labels_b)) / n
    count_a, count_b = Counter(labels_a), Counter(labels_b)
    expected = sum(count_a[label] * count_b[label] for label in count_a.keys() | count_b.keys()) / (n * n)
    if expected >= 1.0:
        return Agreement(n, observed, expected, None)
    return Agreement(n, observed, expected, (observed - expected) / (1.0 - expected))
