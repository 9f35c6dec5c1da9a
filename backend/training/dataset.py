"""`make-data`: deterministic, seeded training and dev sets of edit cases with oracle programs.

    cases = build_cases(DataConfig(train=6000, dev=240, seed=0), eval_cases=...)

Steps: gather source files (`sources`), split them train/dev by a hash of the file's name (so no
file feeds both), cut windows, make one edit of a drawn kind per window (`edits`), add real commit
edits of the training repositories (windows around each change), then write each case's
cost-objective oracle program under the model's tokenizer in the decoder's context layout.

Leak check: the sha256 of every evaluation case's source and target (HumanEvalPack, stdlib-probe,
the held-out commit repositories) and of every stdlib-probe file must not equal the hash of any
training or dev window or file; `LeakError` stops the run loudly if one does.

Case records (JSONL) carry `id`, `source`, `target`, `instruction`, `language`, `kind`, `program`,
`origin`, `file`, `package`, `version`, `license`. The manifest records the generator version,
config, source files with hashes, counts per kind and split, and the evaluation hashes checked.
Standard library plus `backend.core`; the tokenizer comes in as a callable.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from backend.data.corpora import EditCase
from backend.core.oracle import oracle_program
from backend.core.resolve import resolve_program
from backend.training.edits import KINDS, make_edit
from backend.training.sources import SourceFile, cut_windows

GENERATOR_VERSION = 1
TRAIN_COMMIT_REPOS = ("python-attrs/attrs",)  # flask and jquery stay held out for evaluation

# Share of each kind among synthetic cases; real commit windows come on top.
KIND_WEIGHTS = {"rename": 0.11, "literal": 0.09, "delete_line": 0.08, "delete_block": 0.07, "insert": 0.12,
                "replace_line": 0.10, "multi": 0.12, "snippet": 0.16, "fix_bug": 0.15}
JS_SHARE = 0.25


class LeakError(RuntimeError):
    """A training or dev case (or file) equals an evaluation case: the data set must not be used."""


@dataclass(frozen=True)
class DataConfig:
    train: int = 6000
    dev: int = 240
    seed: int = 0
    dev_percent: int = 6            # files whose name hashes below this percentage go to dev
    windows_per_file: int = 3
    commit_windows: int = 2         # windows per training-repository commit
    edits_per_window: int = 1       # training split: up to this many edits of one window (dev stays 1)
    kinds: tuple[str, ...] = field(default=KINDS)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(name: str, dev_percent: int) -> str:
    """"dev" or "train" for a source file, fixed by its name (stable across runs and machines)."""
    return "dev" if int(sha256(name)[:8], 16) % 100 < dev_percent else "train"


def eval_hashes(cases: Iterable[EditCase], files: Iterable[str] = ()) -> set[str]:
    """Hashes a training set must avoid: every case's source and target text, plus file hashes."""
    found = set(files)
    for case in cases:
        found.add(sha256(case.source))
        found.add(sha256(case.target))
    return found


def _draw_kind(rng: random.Random, kinds: tuple[str, ...]) -> str:
    weights = [KIND_WEIGHTS.get(kind, 0.1) for kind in kinds]
    return rng.choices(kinds, weights=weights)[0]


def synthetic_cases(files: list[SourceFile], count: int, split: str, config: DataConfig) -> Iterator[dict[str, Any]]:
    """`count` edit cases from windows of `files` (all of one split), deterministic for the config."""
    rng = random.Random(f"make-data:{config.seed}:{split}")
    by_language = {lang: [f for f in files if f.language == lang] for lang in ("python", "javascript")}
    made = attempts = 0
    while made < count:
        attempts += 1
        if attempts > count * 30:
            raise ValueError(f"{split}: only {made} of {count} cases could be made from {len(files)} files")
        language = "javascript" if by_language["javascript"] and rng.random() < JS_SHARE else "python"
        pool = by_language[language] or files
        source_file = rng.choice(pool)
        per_window = config.edits_per_window if split == "train" else 1
        for first_line, window in cut_windows(source_file.text, rng, 1):
            for kind, edit in window_edits(window, source_file.language, rng, config.kinds, per_window):
                if made >= count:
                    return
                made += 1
                yield {
                    "id": f"{split}/{made:05d}", "source": edit.source, "target": edit.target,
                    "instruction": edit.instruction, "language": source_file.language, "kind": kind,
                    "origin": source_file.origin, "file": source_file.name, "first_line": first_line,
                    "package": source_file.package, "version": source_file.version, "license": source_file.license,
                }


def window_edits(window: str, language: str, rng: random.Random, kinds: tuple[str, ...],
                 per_window: int) -> Iterator[tuple[str, Any]]:
    """Up to `per_window` (kind, Edit) pairs of distinct targets on one window, kinds drawn by
    KIND_WEIGHTS. Several edits of the same window share its prompt, which the trainer computes once
    for all of them (`--pack`); per_window 1 draws exactly as generator version 1 did."""
    seen: set[str] = set()
    for _ in range(per_window if per_window == 1 else 2 * per_window):
        if len(seen) >= per_window:
            return
        kind = _draw_kind(rng, kinds)
        edit = make_edit(window, language, kind, rng)
        if edit is None or edit.target in seen:
            continue
        seen.add(edit.target)
        yield kind, edit


def commit_windows(case: EditCase, rng: random.Random, count: int) -> Iterator[tuple[str, str]]:
    """(source window, target window) pairs around all of a commit's changed lines, 20-200 lines."""
    a, b = case.source.splitlines(keepends=True), case.target.splitlines(keepends=True)
    changes = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not changes:
        return
    first, last = changes[0][1], changes[-1][2]
    shift = len(b) - len(a)
    for _ in range(count):
        start = max(0, first - rng.randint(3, 40))
        end = min(len(a), max(last, first + 1) + rng.randint(3, 40))
        if end - start > 200 or end - start < 20:
            continue
        source, target = "".join(a[start:end]), "".join(b[start:end + shift])
        if source != target and source.endswith("\n") and target.endswith("\n"):
            yield source, target


def commit_cases(commits: list[EditCase], config: DataConfig) -> Iterator[dict[str, Any]]:
    """Windows around the real edits of the training repositories (TRAIN_COMMIT_REPOS)."""
    rng = random.Random(f"make-data:{config.seed}:commits")
    made = 0
    for case in commits:
        if case.meta.get("repo") not in TRAIN_COMMIT_REPOS:
            continue
        seen = set()
        for source, target in commit_windows(case, rng, config.commit_windows):
            if (source, target) in seen:
                continue
            seen.add((source, target))
            made += 1
            yield {
                "id": f"train/commit-{made:04d}", "source": source, "target": target,
                "instruction": case.instruction or "Apply the edit.", "language": case.language or "python",
                "kind": "commit", "origin": "commit", "file": f"{case.meta.get('repo')}:{case.meta.get('path')}",
                "package": case.meta.get("repo"), "version": case.meta.get("commit"), "license": case.meta.get("license"),
            }


def add_programs(records: list[dict[str, Any]], tokenize: Callable[[str], list[str]], render: Callable[[Any], str]) -> None:
    """Fill each record's `program`: the cost-objective oracle program, rendered for the decoder."""
    for record in records:
        ops = oracle_program(record["source"], record["target"], objective="cost", tokenize=tokenize)
        if resolve_program(ops, record["source"]) != record["target"]:
            raise AssertionError(f"{record['id']}: oracle program does not resolve to the target")
        record["program"] = render(ops)


def check_leaks(records: list[dict[str, Any]], files: list[SourceFile], forbidden: set[str]) -> int:
    """Raise LeakError if any record's source/target or any used file's text hashes into `forbidden`.
    Returns how many hashes were checked."""
    checked = 0
    for record in records:
        for key in ("source", "target"):
            checked += 1
            if sha256(record[key]) in forbidden:
                raise LeakError(f"{record['id']} ({record['file']}): its {key} equals an evaluation case")
    for source_file in files:
        checked += 1
        if source_file.sha256 in forbidden:
            raise LeakError(f"training source {source_file.name} is an evaluation file")
    return checked


def manifest(config: DataConfig, files: list[SourceFile], splits: dict[str, list[dict[str, Any]]],
             checked: int, forbidden: int, extra: dict[str, Any]) -> dict[str, Any]:
    used = {r["file"] for records in splits.values() for r in records}
    return {
        "generator_version": GENERATOR_VERSION,
        "config": asdict(config),
        "counts": {name: dict(sorted(Counter(r["kind"] for r in records).items())) for name, records in splits.items()},
        "languages": {name: dict(Counter(r["language"] for r in records)) for name, records in splits.items()},
        "sources": [
            {"name": f.name, "origin": f.origin, "package": f.package, "version": f.version, "license": f.license,
             "sha256": f.sha256, "split": split_of(f.name, config.dev_percent)}
            for f in files if f.name in used
        ],
        "packages": sorted({(f.origin, f.package, f.version, f.license) for f in files}),
        "leak_check": {"hashes_checked": checked, "evaluation_hashes": forbidden, "leaks": 0},
        "train_commit_repos": list(TRAIN_COMMIT_REPOS),
        **extra,
    }


def write_jsonl(records: list[dict[str, Any]], path: Path) -> str:
    """Write records one per line; returns the file's sha256."""
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    path.write_text(text, encoding="utf-8")
    return sha256(text)
