"""Corpus loaders: the real shared data, both HumanEvalPack layouts, the case format, error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.data.corpora import (
    CorpusError,
    EditCase,
    default_data_dir,
    load_corpus,
    load_humanevalpack,
    read_jsonl,
    write_jsonl,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _hep_row(task_id: str, buggy: str, canonical: str, declaration: str = "def f(x):\n") -> dict:
    return {"task_id": task_id, "declaration": declaration, "buggy_solution": buggy,
            "canonical_solution": canonical, "instruction": "Fix the bug.", "bug_type": "operator misuse"}


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- the real data ----------------------------------------------------------------------------------

def test_default_data_dir_is_the_shared_data():
    assert default_data_dir() == SHARED


@pytest.mark.parametrize(
    "name__count__language",
    [("humanevalpack-python", 164, "python"), ("humanevalpack-js", 164, "javascript"), ("commits", 150, None)],
)
def test_real_corpus__count__language(name__count__language):
    name, count, language = name__count__language
    cases = load_corpus(name)
    assert len(cases) == count
    assert len({c.id for c in cases}) == count
    assert all(c.source != c.target for c in cases)
    if language:
        assert {c.language for c in cases} == {language}
    else:
        assert {c.language for c in cases} == {"python", "javascript"}


def test_humanevalpack_fields_map_to_source_and_target():
    rows = [json.loads(line) for line in (SHARED / "humanevalpack" / "humanevalpack_python.jsonl").open(encoding="utf-8")]
    cases = load_corpus("humanevalpack-python")
    assert cases[0].id == rows[0]["task_id"] == "Python/0"
    assert cases[0].source == rows[0]["buggy_solution"]
    assert cases[0].target == rows[0]["canonical_solution"]
    assert cases[0].instruction == rows[0]["instruction"]
    with_declaration = load_corpus("humanevalpack-python", prepend_declaration=True)
    assert with_declaration[5].source == rows[5]["declaration"] + rows[5]["buggy_solution"]
    assert with_declaration[5].target == rows[5]["declaration"] + rows[5]["canonical_solution"]


def test_commits_keep_attribution_in_meta():
    case = load_corpus("commits", SHARED)[0]
    assert case.instruction
    assert {"repo", "commit", "path", "license"} <= set(case.meta)


# --- HumanEvalPack layouts --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "layout",
    [
        "humanevalpack_{lang}.jsonl",                                         # shared data, flat
        "humanevalpack/humanevalpack_{lang}.jsonl",                           # shared data layout
        "data/{lang}/data/humanevalpack.jsonl",                               # bigcode/humanevalpack repo
        "humanevalpack/data/{lang}/data/humanevalpack.jsonl",                 # ... cloned into humanevalpack/
        "{lang}/data/humanevalpack.jsonl",                                    # ... its data/ folder
        "evaluation/create/humaneval-x/data/{lang}/data/humanevalpack.jsonl",  # octopack repository
    ],
)
def test_humanevalpack_layout(tmp_path, layout):
    for lang, prefix in (("python", "Python"), ("js", "JavaScript")):
        _write_rows(tmp_path / layout.format(lang=lang),
                    [_hep_row(f"{prefix}/0", "    return x - 1\n", "    return x + 1\n"),
                     _hep_row(f"{prefix}/1", "  a\r\n  b", "  a\r\n  c")])
    python = load_corpus("humanevalpack-python", tmp_path)
    js = load_corpus("humanevalpack-js", tmp_path)
    assert [c.id for c in python] == ["Python/0", "Python/1"]
    assert [c.id for c in js] == ["JavaScript/0", "JavaScript/1"]
    assert python[1].source == "  a\r\n  b" and python[1].target == "  a\r\n  c"
    assert js[0].language == "javascript"
    assert load_corpus("humanevalpack-python", tmp_path, prepend_declaration=True)[0].source == "def f(x):\n    return x - 1\n"


def test_humanevalpack_parquet_only_gets_a_conversion_hint(tmp_path):
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "test-00000-of-00001.parquet").write_bytes(b"PAR1")
    with pytest.raises(CorpusError, match="parquet is not read"):
        load_corpus("humanevalpack-python", tmp_path)


def test_humanevalpack_missing_says_where_to_get_it(tmp_path):
    with pytest.raises(CorpusError) as error:
        load_corpus("humanevalpack-js", tmp_path)
    message = str(error.value)
    assert "bigcode/humanevalpack" in message and "octopack" in message and str(tmp_path) in message


def test_missing_data_directory(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus("commits", tmp_path / "nowhere")
    with pytest.raises(CorpusError, match="commits_public.jsonl"):
        load_corpus("commits", tmp_path)


# --- the case format --------------------------------------------------------------------------------

def test_jsonl_round_trip_keeps_bytes_and_meta(tmp_path):
    cases = [
        EditCase("a", "x\r\ny\rz", "x\r\nY\rz", instruction="capitalise", language="python", meta={"repo": "r", "n": 3}),
        EditCase("b", "", "é😀\u2028\x0c</gen>", None, None),
    ]
    path = tmp_path / "cases.jsonl"
    assert write_jsonl(cases, path) == 2
    loaded = read_jsonl(path)
    assert loaded == cases
    assert loaded[0].meta == {"repo": "r", "n": 3}
    assert load_corpus(str(path)) == cases  # a path works wherever a name does


@pytest.mark.parametrize(
    "content__message",
    [
        (b'{"id": "a", "source": "", "target": ""}\n\n{"id": "b", "source": ""', r"cases\.jsonl:3: invalid JSON"),
        (b'{"id": "a", "source": "", "target": ""}\n{"id": "b", "source": "x"}\n', r"cases\.jsonl:2: missing field 'target'"),
        (b'{"id": "a", "source": 1, "target": ""}\n', r"cases\.jsonl:1: field 'source' must be a string"),
        (b'{"id": "a", "source": "\xff", "target": ""}\n', r"cases\.jsonl:1: not valid UTF-8"),
        (b'["a"]\n', r"cases\.jsonl:1: expected a JSON object"),
        (b'{"id": "a", "source": "", "target": ""}\n{"id": "a", "source": "", "target": ""}\n',
         r"cases\.jsonl:2: duplicate id 'a' \(first on line 1\)"),
    ],
)
def test_bad_jsonl__message(tmp_path, content__message):
    content, message = content__message
    path = tmp_path / "cases.jsonl"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        read_jsonl(path)


def test_bad_humanevalpack_row_names_file_and_line(tmp_path):
    path = _write_rows(tmp_path / "humanevalpack_python.jsonl", [_hep_row("Python/0", "a", "b"), {"task_id": "Python/1"}])
    with pytest.raises(CorpusError, match=r"humanevalpack_python\.jsonl:2: missing field 'buggy_solution'"):
        load_humanevalpack(path)


def test_unknown_name_and_missing_path(tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus 'nope'"):
        load_corpus("nope")
    with pytest.raises(CorpusError, match="no such file"):
        load_corpus(str(tmp_path / "missing.jsonl"))


def test_corpus_error_is_a_value_error():
    assert issubclass(CorpusError, ValueError)
