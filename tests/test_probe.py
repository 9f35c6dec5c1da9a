"""stdlib-probe: seeded, each target is its source plus exactly the declared edit, provenance recorded."""

from __future__ import annotations

import ast
import collections
import hashlib
import platform
import re

import pytest

from backend.data.corpora import CorpusError, load_corpus
from backend.core.lines import split_lines, strip_line_ending
from backend.data.probe import KINDS, MAX_LINES, MIN_LINES, generate_probe, probe_manifest, stdlib_dir, stdlib_files


@pytest.fixture(scope="module")
def probe():
    return generate_probe()


def test_default_size_and_kinds(probe):
    assert len(probe) == 150
    assert collections.Counter(c.meta["edit"]["kind"] for c in probe) == {kind: 30 for kind in KINDS}
    assert len({c.id for c in probe}) == 150
    assert all(c.language == "python" and c.instruction for c in probe)


def test_same_seed_same_cases_other_seed_other_cases(probe):
    again = generate_probe(count=20)
    assert [(c.id, c.source, c.target, c.instruction) for c in again] == [
        (c.id, c.source, c.target, c.instruction) for c in probe[:20]]
    other = generate_probe(seed=1, count=20)
    assert [c.target for c in other] != [c.target for c in probe[:20]]


def test_load_by_name_generates_the_default_set(probe):
    assert [c.target for c in load_corpus("stdlib-probe")] == [c.target for c in probe]


def _line_bodies(text: str) -> list[str]:
    return [strip_line_ending(line) for line in split_lines(text)]


def _check_declared_edit(case) -> None:
    edit = case.meta["edit"]
    source, target = _line_bodies(case.source), _line_bodies(case.target)
    kind = edit["kind"]
    if kind in ("change_line", "alter_constant"):
        number = edit["line"]
        assert source[number - 1] == edit["before"] != edit["after"]
        assert target == source[:number - 1] + [edit["after"]] + source[number:]
        if kind == "alter_constant":
            col = edit["column"]
            assert edit["before"][col:col + len(edit["old"])] == edit["old"]
            assert edit["after"] == edit["before"][:col] + edit["new"] + edit["before"][col + len(edit["old"]):]
            assert ast.literal_eval(edit["old"]) != ast.literal_eval(edit["new"])
        else:
            assert edit["after"].count(edit["replacement"]) >= 1
    elif kind == "insert_line":
        number = edit["line"]
        assert target == source[:number - 1] + [edit["after"]] + source[number - 1:]
        assert edit["after"].strip().startswith("#")
        indent = len(source[number - 1]) - len(source[number - 1].lstrip())
        assert edit["after"][:indent] == source[number - 1][:indent]
    elif kind == "delete_line":
        number = edit["line"]
        assert source[number - 1] == edit["before"]
        assert target == source[:number - 1] + source[number:]
    else:
        assert kind == "rename_identifier"
        old, new = edit["old"], edit["new"]
        assert len(source) == len(target)
        changed = [i + 1 for i, (a, b) in enumerate(zip(source, target)) if a != b]
        assert changed == edit["lines"]
        assert all(target[i - 1].replace(new, old) == source[i - 1] for i in changed)
        assert not re.search(rf"\b{new}\b", case.source)
        assert len(re.findall(rf"\b{new}\b", case.target)) == edit["occurrences"] >= 2
    # line endings of untouched lines are kept byte for byte
    assert "".join(split_lines(case.target)).count("\r") == case.source.count("\r")
    ast.parse(case.target)


def test_every_target_is_the_source_plus_the_declared_edit(probe):
    for case in probe:
        assert case.source != case.target, case.id
        _check_declared_edit(case)


def test_provenance_is_recorded(probe):
    hashes = {}
    for case in probe:
        meta = case.meta
        assert meta["python_version"] == platform.python_version()
        assert meta["seed"] == 0
        if meta["stdlib_file"] not in hashes:
            hashes[meta["stdlib_file"]] = hashlib.sha256((stdlib_dir() / meta["stdlib_file"]).read_bytes()).hexdigest()
        assert meta["file_sha256"] == hashes[meta["stdlib_file"]]
        assert MIN_LINES <= meta["file_lines"] == len(split_lines(case.source)) <= MAX_LINES
    manifest = probe_manifest()
    listed = {f["name"]: f["sha256"] for f in manifest["files"]}
    assert manifest["python_version"] == platform.python_version()
    assert all(listed[name] == digest for name, digest in hashes.items())


def _synthetic_module(functions: int) -> str:
    parts = ['"""A synthetic module."""\n', "import os\n", "LIMIT = 10\n", "\n"]
    for i in range(functions):
        parts.append(
            f"def work_{i}(items, flag=True):\n"
            f"    total = {i}\n"
            f"    for item in items:\n"
            f"        if item == {i} and flag:\n"
            f"            total += item * 2\n"
            f"        count = total - 1\n"
            f"    result = total + count\n"
            f"    return result\n"
            f"\n"
        )
    return "".join(parts)


def test_generates_from_any_directory_and_filters_files(tmp_path):
    (tmp_path / "long_mod.py").write_text(_synthetic_module(40), encoding="utf-8")  # 364 lines
    (tmp_path / "short_mod.py").write_text(_synthetic_module(2), encoding="utf-8")
    (tmp_path / "_sysconfigdata__x.py").write_text(_synthetic_module(40), encoding="utf-8")
    (tmp_path / "latin1_mod.py").write_bytes(_synthetic_module(40).encode() + b"# \xe9\n")
    assert [f.name for f in stdlib_files(tmp_path)] == ["long_mod.py"]
    cases = generate_probe(seed=3, count=10, directory=tmp_path)
    assert cases == generate_probe(seed=3, count=10, directory=tmp_path)
    for case in cases:
        _check_declared_edit(case)
    assert {c.meta["edit"]["kind"] for c in cases} == set(KINDS)


def test_empty_directory_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match="no standard-library file"):
        generate_probe(directory=tmp_path)
