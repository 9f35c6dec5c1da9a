"""`make-data` end to end: sources -> cases -> leak check -> oracle programs -> files + manifest.

Kept apart from `dataset` because it reaches outside the standard library: the SmolLM2 tokenizer
(backend.tokenizers), the evaluation corpora and the probe's file list.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from backend.training.dataset import (
    DataConfig,
    check_leaks,
    commit_cases,
    eval_hashes,
    manifest,
    split_of,
    synthetic_cases,
    write_jsonl,
    add_programs,
)
from backend.training.sources import SourceFile, npm_files, pypi_files, stdlib_files

EVAL_CORPORA = ("humanevalpack-python", "humanevalpack-js", "stdlib-probe", "commits")


def default_npm_cache() -> Path:
    from backend.runtime.models import user_cache_dir

    return user_cache_dir() / "npm"


def gather_files(*, js: bool, npm_cache: str | None) -> list[SourceFile]:
    files = stdlib_files() + pypi_files()
    if js:
        files += npm_files(Path(npm_cache) if npm_cache else default_npm_cache())
    return files


def forbidden_hashes(data_dir: str | None) -> tuple[set[str], list[Any]]:
    """Hashes of every evaluation case (and stdlib-probe file), and the commit cases (for training
    windows of the training repositories)."""
    from backend.data.corpora import load_corpus
    from backend.data.probe import probe_manifest
    from backend.training.dataset import TRAIN_COMMIT_REPOS

    cases, commits = [], []
    for name in EVAL_CORPORA:
        loaded = load_corpus(name, data_dir)
        if name == "commits":
            commits = loaded
            loaded = [c for c in loaded if c.meta.get("repo") not in TRAIN_COMMIT_REPOS]
        cases += loaded
    probe_files = [f["sha256"] for f in probe_manifest()["files"]]
    return eval_hashes(cases, probe_files), commits


def build_dataset(out: Path, *, train: int, dev: int, seed: int, js: bool, npm_cache: str | None,
                  data_dir: str | None, log: Callable[[str], None], edits_per_window: int = 1) -> dict[str, Any]:
    from backend.runtime.prompt import context_program
    from backend.tokenizers import load_tokenizer

    started = time.perf_counter()
    config = DataConfig(train=train, dev=dev, seed=seed, edits_per_window=edits_per_window)
    files = gather_files(js=js, npm_cache=npm_cache)
    log(f"{len(files)} source files ({sum(f.language == 'javascript' for f in files)} JavaScript)")
    forbidden, commits = forbidden_hashes(data_dir)
    log(f"{len(forbidden)} evaluation hashes to avoid")
    by_split = {"train": [f for f in files if split_of(f.name, config.dev_percent) == "train"],
                "dev": [f for f in files if split_of(f.name, config.dev_percent) == "dev"]}
    commit_records = list(commit_cases(commits, config))
    splits = {
        "train": list(synthetic_cases(by_split["train"], max(0, train - len(commit_records)), "train", config)) + commit_records,
        "dev": list(synthetic_cases(by_split["dev"], dev, "dev", config)),
    }
    log(f"{len(splits['train'])} train cases ({len(commit_records)} from commits), {len(splits['dev'])} dev cases")
    train_names = {r["file"] for r in splits["train"]}
    overlap = train_names & {r["file"] for r in splits["dev"]}
    if overlap:
        raise ValueError(f"files in both splits: {sorted(overlap)[:3]}")
    checked = check_leaks(splits["train"] + splits["dev"], files, forbidden)
    tokenizer = load_tokenizer("smollm2")
    for name, records in splits.items():
        add_programs(records, tokenizer.pieces, context_program)
        log(f"{name}: oracle programs written")
    out.mkdir(parents=True, exist_ok=True)
    hashes = {f"{name}_sha256": write_jsonl(records, out / f"{name}.jsonl") for name, records in splits.items()}
    document = manifest(config, files, splits, checked, len(forbidden),
                        {**hashes, "seconds": round(time.perf_counter() - started, 1), "out": str(out)})
    import json

    (out / "manifest.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return {k: document[k] for k in ("generator_version", "counts", "languages", "leak_check", "train_sha256",
                                      "dev_sha256", "seconds", "out")}
