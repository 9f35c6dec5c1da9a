"""Edit corpora: one case format, loaders for HumanEvalPack-Fix, real commit edits and stdlib-probe.

Case format (JSONL, one object per line, UTF-8):
    {"id": str, "source": str, "target": str, "instruction": str?, "language": str?, ...extra}
Extra keys (a commit's repo/commit/path/license, the probe's file hash) are kept in `EditCase.meta`
and written back as top-level keys.

Named corpora, looked up under a data directory (default: `../shared/data` next to the repository,
when it exists):
- `humanevalpack-python`, `humanevalpack-js`: HumanEvalPack "fix" task, source = buggy_solution,
  target = canonical_solution (option `prepend_declaration` puts `declaration` before both). Accepted
  layouts, tried in this order under each of `DATA`, `DATA/humanevalpack`, `DATA/bigcode/humanevalpack`
  (LANG = `python` or `js`):
    `humanevalpack_LANG.jsonl`                         (this project's shared data)
    `data/LANG/data/humanevalpack.jsonl`               (the `bigcode/humanevalpack` dataset repository)
    `LANG/data/humanevalpack.jsonl`                    (the same, pointed at its `data/` folder)
    `evaluation/create/humaneval-x/data/LANG/data/humanevalpack.jsonl`   (the octopack repository)
  Parquet exports (`LANG/test-*.parquet`) are not read (the core is standard library only): convert
  them to JSONL first; the error message says so.
- `commits`: `DATA/commits/commits_public.jsonl` (already in the case format).
- `stdlib-probe`: generated in memory from the running interpreter's standard library (see probe.py).
A path to a `.jsonl` file in the case format is accepted wherever a name is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from backend.data.cases import CorpusError, EditCase

CORPUS_NAMES = ("humanevalpack-python", "humanevalpack-js", "commits", "stdlib-probe")
HUMANEVALPACK_LANGUAGES = {"humanevalpack-python": ("python", "python"), "humanevalpack-js": ("js", "javascript")}
COMMITS_FILE = Path("commits") / "commits_public.jsonl"

WHERE_TO_GET = {
    "humanevalpack": (
        "get HumanEvalPack from the `bigcode/humanevalpack` dataset on the Hugging Face hub "
        "(data/python/data/humanevalpack.jsonl, data/js/data/humanevalpack.jsonl) or the octopack repository "
        "(github.com/bigcode-project/octopack, evaluation/create/humaneval-x/data/LANG/data/humanevalpack.jsonl) "
        "and put it under the data directory (--data-dir)"
    ),
    "commits": "commits_public.jsonl comes with the project's shared data (../shared/data/commits); pass --data-dir",
}


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; raises CorpusError naming file:line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except OSError as error:
        raise CorpusError(f"{path}: cannot read ({error.strerror or error})") from None
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CorpusError(f"{path}:{number}: not valid UTF-8 (byte {error.start} of the line)") from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise CorpusError(f"{path}:{number}: invalid JSON at column {error.colno}: {error.msg}") from None
        if not isinstance(value, dict):
            raise CorpusError(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
        yield number, value


def _field(record: dict[str, Any], key: str, where: str, *, optional: bool = False) -> str | None:
    value = record.get(key)
    if value is None and optional:
        return None
    if value is None:
        raise CorpusError(f"{where}: missing field {key!r}")
    if not isinstance(value, str):
        raise CorpusError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def read_jsonl(path: str | Path) -> list[EditCase]:
    """Read cases in the case format. Raises CorpusError (missing file, non-UTF-8, bad JSON, missing field,
    duplicate id), naming the file and line."""
    path = Path(path)
    cases: list[EditCase] = []
    seen: dict[str, int] = {}
    for number, record in _json_lines(path):
        where = f"{path}:{number}"
        case_id = _field(record, "id", where)
        assert case_id is not None
        if case_id in seen:
            raise CorpusError(f"{where}: duplicate id {case_id!r} (first on line {seen[case_id]})")
        seen[case_id] = number
        meta = {k: v for k, v in record.items() if k not in ("id", "source", "target", "instruction", "language")}
        cases.append(
            EditCase(
                id=case_id,
                source=_field(record, "source", where) or "",
                target=_field(record, "target", where) or "",
                instruction=_field(record, "instruction", where, optional=True),
                language=_field(record, "language", where, optional=True),
                meta=meta,
            )
        )
    return cases


def write_jsonl(cases: Iterable[EditCase], path: str | Path) -> int:
    """Write cases in the case format (UTF-8, `\\n` between records); returns how many were written."""
    count = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for case in cases:
            handle.write(json.dumps(case.to_record(), ensure_ascii=False) + "\n")
            count += 1
    return count


def humanevalpack_candidates(data_dir: Path, language: str) -> list[Path]:
    """The files tried for one HumanEvalPack language (`python` or `js`), in order."""
    roots = [data_dir, data_dir / "humanevalpack", data_dir / "bigcode" / "humanevalpack"]
    layouts = [
        Path(f"humanevalpack_{language}.jsonl"),
        Path("data") / language / "data" / "humanevalpack.jsonl",
        Path(language) / "data" / "humanevalpack.jsonl",
        Path("evaluation/create/humaneval-x/data") / language / "data" / "humanevalpack.jsonl",
    ]
    return [root / layout for root in roots for layout in layouts]


def load_humanevalpack(path: str | Path, *, language: str = "python", prepend_declaration: bool = False) -> list[EditCase]:
    """HumanEvalPack-Fix cases from one octopack-format JSONL file.

    source = buggy_solution, target = canonical_solution; with `prepend_declaration`, `declaration` is
    put before both. id = task_id. Raises CorpusError naming file:line for a bad row.
    """
    path = Path(path)
    cases = []
    for number, record in _json_lines(path):
        where = f"{path}:{number}"
        task_id = _field(record, "task_id", where) or ""
        buggy = _field(record, "buggy_solution", where) or ""
        canonical = _field(record, "canonical_solution", where) or ""
        prefix = (_field(record, "declaration", where) or "") if prepend_declaration else ""
        meta = {key: record[key] for key in ("bug_type", "failure_symptoms", "entry_point") if key in record}
        cases.append(
            EditCase(
                id=task_id,
                source=prefix + buggy,
                target=prefix + canonical,
                instruction=_field(record, "instruction", where, optional=True),
                language=language,
                meta=meta,
            )
        )
    return cases


def _find_humanevalpack(data_dir: Path, short: str) -> Path:
    candidates = humanevalpack_candidates(data_dir, short)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    parquet = sorted(p for root in candidates[:1] for p in root.parent.glob(f"**/{short}/*.parquet"))
    hint = f" (found {parquet[0]}: parquet is not read; convert it to JSONL)" if parquet else ""
    raise CorpusError(
        f"HumanEvalPack {short} not found under {data_dir}{hint}; looked for humanevalpack_{short}.jsonl, "
        f"data/{short}/data/humanevalpack.jsonl (also under humanevalpack/); {WHERE_TO_GET['humanevalpack']}"
    )


def default_data_dir() -> Path | None:
    """`../shared/data` relative to the repository root, when that directory exists."""
    candidate = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def load_corpus(name_or_path: str | Path, data_dir: str | Path | None = None, *, prepend_declaration: bool = False) -> list[EditCase]:
    """Cases of a named corpus (see CORPUS_NAMES) or of a case-format JSONL file.

    `data_dir` defaults to `default_data_dir()`. Raises CorpusError: unknown name, missing data directory
    or file (saying where to get the data), or a malformed record (file:line).
    """
    name = str(name_or_path)
    if name == "stdlib-probe":
        from backend.data.probe import generate_probe

        return generate_probe()
    if name not in CORPUS_NAMES:
        path = Path(name)
        if path.suffix == ".jsonl" or path.is_file():
            if not path.is_file():
                raise CorpusError(f"{path}: no such file")
            return read_jsonl(path)
        raise CorpusError(f"unknown corpus {name!r}: use one of {', '.join(CORPUS_NAMES)} or a path to a .jsonl file")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if root is None:
        raise CorpusError(
            f"no data directory for {name!r}: ../shared/data does not exist; pass --data-dir DIR "
            f"({WHERE_TO_GET['commits' if name == 'commits' else 'humanevalpack']})"
        )
    if not root.is_dir():
        raise CorpusError(f"data directory {root} does not exist; {WHERE_TO_GET['commits' if name == 'commits' else 'humanevalpack']}")
    if name == "commits":
        path = root / COMMITS_FILE
        if not path.is_file():
            raise CorpusError(f"{path} not found; {WHERE_TO_GET['commits']}")
        return read_jsonl(path)
    short, language = HUMANEVALPACK_LANGUAGES[name]
    return load_humanevalpack(_find_humanevalpack(root, short), language=language, prepend_declaration=prepend_declaration)
