"""Training data: edits are exact and verifiable, splits and leak checks hold, labels mask copies."""

from __future__ import annotations

import random

import pytest

from backend.data.corpora import EditCase
from backend.core.oracle import oracle_program
from backend.core.resolve import resolve_program
from backend.runtime.prompt import context_program
from backend.training import dataset, edits, line_edits, line_ops
from backend.training.scan import code_names, scan
from backend.training.sources import cut_windows, is_permissive, usable_text

PY_WINDOW = '''def total(items, scale=2):
    """Sum of the items, scaled."""
    result = 0
    for item in items:
        if item > 0 and not item.skip:
            result += item.value * scale
    label = "total: %d" % result
    print(label)
    return result


def mean(items):
    count = len(items)
    if count == 0:
        return 0
    return total(items) / count
'''

JS_WINDOW = '''function total(items, scale) {
  let result = 0;
  for (const item of items) {
    if (item.value > 0 && !item.skip) {
      result += item.value * scale;
    }
  }
  console.log("total", result);
  return result;
}

const mean = (items) => {
  const count = items.length;
  return count === 0 ? 0 : total(items, 1) / count;
};
'''


def test_scan__strings_and_comments_are_not_code():
    tokens = scan('x = "a + b"  # y + z\nw = x\n', "python")
    assert [t.text for t in tokens if t.kind == "name"] == ["x", "w", "x"]
    assert [t.kind for t in tokens if t.text.startswith(('"', "#"))] == ["string", "comment"]
    js = scan("const s = `a ${b}`; // c\nlet d = s;\n", "javascript")
    assert [t.text for t in js if t.kind == "name"] == ["const", "s", "let", "d", "s"]


def test_code_names__attributes_and_keyword_arguments_are_not_renamable():
    names = code_names(scan("obj.value = value\nf(value=1)\nkeep = keep + 1\n", "python"), "python")
    assert "value" not in names and "keep" in names and len(names["keep"]) == 2


@pytest.mark.parametrize("language, window", [("python", PY_WINDOW), ("javascript", JS_WINDOW)])
@pytest.mark.parametrize("kind", edits.KINDS)
def test_make_edit__every_kind_changes_the_window_and_is_deterministic(kind, language, window):
    made = [edits.make_edit(window, language, kind, random.Random(seed)) for seed in range(12)]
    found = [e for e in made if e is not None]
    if kind == "insert" and language == "javascript":
        found = [e for e in found if e.instruction]
    assert found, f"no {kind} edit in 12 tries"
    for edit in found:
        assert edit.source != edit.target and edit.instruction.strip()
        assert edit.kind == kind
    again = edits.make_edit(window, language, kind, random.Random(0))
    assert again == made[0]


def test_rename__renames_every_code_occurrence_and_nothing_in_strings():
    lines = PY_WINDOW.splitlines(keepends=True)
    for seed in range(10):
        ops, instruction = line_edits.rename(lines, "python", random.Random(seed))
        target = line_ops.apply_ops(lines, ops)
        before = code_names(scan(PY_WINDOW, "python"), "python")
        after = code_names(scan(target, "python"), "python")
        (old,) = set(before) - set(after)
        (new,) = set(after) - set(before)
        assert len(after[new]) == len(before[old]) and old in instruction and new in instruction
        assert '"total: %d"' in target and '"""Sum of the items, scaled."""' in target


def test_fix_bug__source_is_buggy_target_is_the_original():
    edit = edits.make_edit(PY_WINDOW, "python", "fix_bug", random.Random(1))
    assert edit is not None and edit.target == PY_WINDOW and edit.source != PY_WINDOW
    changed = [a for a, b in zip(edit.source.splitlines(), PY_WINDOW.splitlines()) if a != b]
    assert len(changed) == 1


def test_snippet__instruction_shows_the_changed_region_with_markers():
    for seed in range(20):
        edit = edits.make_edit(PY_WINDOW, "python", "snippet", random.Random(seed))
        if edit is not None and "existing code" in edit.instruction:
            break
    assert edit is not None and "# ... existing code ..." in edit.instruction
    shown = edit.instruction.split("```\n", 1)[1].rsplit("```", 1)[0]
    body = [line for line in shown.splitlines() if "existing code" not in line]
    target_lines = edit.target.splitlines()
    assert any(target_lines[i:i + len(body)] == body for i in range(len(target_lines)))


def test_delete_line__never_picks_a_line_inside_brackets():
    window = "x = f(\n    a,\n    b,\n)\ny = 2\nz = 3\n"
    for seed in range(20):
        ops, _ = line_edits.delete_line(window.splitlines(keepends=True), "python", random.Random(seed))
        assert set(ops) <= {4, 5}


def test_cut_windows__sizes_and_starts():
    text = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(200))
    windows = cut_windows(text, random.Random(0), 20)
    assert windows
    for first, window in windows:
        assert 20 <= window.count("\n") <= 200 and window.endswith("\n")
        assert text.splitlines(keepends=True)[first - 1:].__len__() > 0


def test_usable_text__refuses_binary_generated_and_long_lines():
    good = "x = 1\n" * 30
    assert usable_text(good.encode()) == good
    assert usable_text(b"\x00" + good.encode()) is None
    assert usable_text(("# generated by tool, do not edit\n" + good).encode()) is None
    assert usable_text(("y" * 500 + "\n" + good).encode()) is None
    assert usable_text(b"\xff\xfe" + good.encode()) is None


def test_licences():
    assert is_permissive("MIT") and is_permissive("BSD-3-Clause") and is_permissive("Apache-2.0")
    assert not is_permissive("GPL-3.0") and not is_permissive("LGPL-2.1 or BSD")  # GPL anywhere: refused
    assert not is_permissive("unknown")


def test_split_of__stable_and_roughly_the_asked_share():
    names = [f"pypi:x==1:pkg/m{i}.py" for i in range(2000)]
    dev = [n for n in names if dataset.split_of(n, 6) == "dev"]
    assert dev == [n for n in names if dataset.split_of(n, 6) == "dev"]
    assert 60 <= len(dev) <= 180


def test_check_leaks__fails_loudly_on_an_evaluation_case():
    case = EditCase("he/1", PY_WINDOW, PY_WINDOW.replace("> 0", ">= 0"))
    forbidden = dataset.eval_hashes([case])
    record = {"id": "train/1", "file": "f.py", "source": PY_WINDOW, "target": "other\n"}
    with pytest.raises(dataset.LeakError, match="train/1"):
        dataset.check_leaks([record], [], forbidden)
    assert dataset.check_leaks([{**record, "source": "clean\n"}], [], forbidden) == 2


def test_commit_windows__crop_source_and_target_consistently():
    source = "".join(f"line {i}\n" for i in range(300))
    target = source.replace("line 150\n", "line 150 changed\nextra\n")
    case = EditCase("c/1", source, target, "Change line 150", meta={"repo": "python-attrs/attrs"})
    pairs = list(dataset.commit_windows(case, random.Random(0), 5))
    assert pairs
    for window_source, window_target in pairs:
        assert window_source in source and window_target in target
        assert "line 150 changed\nextra\n" in window_target and "line 150\n" in window_source


def test_add_programs__oracle_programs_resolve_to_the_target():
    records = [{"id": "1", "source": PY_WINDOW, "target": PY_WINDOW.replace("scale=2", "scale=3")}]
    dataset.add_programs(records, lambda text: list(text), context_program)
    assert resolve_program(records[0]["program"], PY_WINDOW) == records[0]["target"]
    assert records[0]["program"].startswith('<copy lines="1-0') is False
    assert oracle_program(PY_WINDOW, records[0]["target"], objective="cost")


@pytest.mark.slow
def test_make_data_command__writes_split_leak_checked_cases_with_programs(tmp_path):
    import hashlib
    import json
    import subprocess
    import sys

    out = tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "backend", "make-data", "--out", str(out), "--train", "150", "--dev", "12",
                           "--no-js"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["leak_check"]["leaks"] == 0 and summary["leak_check"]["evaluation_hashes"] > 500
    train = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    dev = [json.loads(line) for line in (out / "dev.jsonl").read_text().splitlines()]
    assert len(train) == 150 and len(dev) == 12 and any(r["kind"] == "commit" for r in train)
    assert not {r["file"] for r in train} & {r["file"] for r in dev}
    for record in train[:20] + dev:
        assert resolve_program(record["program"], record["source"]) == record["target"]
        assert record["license"] and record["package"]
    assert summary["train_sha256"] == hashlib.sha256((out / "train.jsonl").read_bytes()).hexdigest()
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(manifest["counts"]["train"].values()) == len(train)
    assert {s["split"] for s in manifest["sources"]} == {"train", "dev"}


def test_synthetic_cases__edits_per_window_shares_windows_in_train_only():
    from backend.training.sources import SourceFile

    files = [SourceFile(name=f"pkg/m{i}.py", text=(PY_WINDOW + "\n\n") * 3, language="python", origin="test",
                        package="pkg", version="1", license="MIT") for i in range(4)]
    one = list(dataset.synthetic_cases(files, 40, "train", dataset.DataConfig()))
    again = list(dataset.synthetic_cases(files, 40, "train", dataset.DataConfig(edits_per_window=1)))
    assert one == again  # the default draws as before: the shipped data's hashes still reproduce
    four = list(dataset.synthetic_cases(files, 40, "train", dataset.DataConfig(edits_per_window=4)))
    assert len(four) == 40 and [r["id"] for r in four] == [f"train/{i:05d}" for i in range(1, 41)]
    runs: list = []  # the edits of one drawn window come one after another
    for record in four:
        key = (record["file"], record["first_line"], record["source"])
        if runs and runs[-1][0] == key and len(runs[-1][1]) < 4:
            runs[-1][1].append(record)
        else:
            runs.append((key, [record]))
    assert max(len(group) for _, group in runs) >= 3                # edits of one window share its source
    for _, group in runs:
        assert len({r["target"] for r in group}) == len(group)       # distinct edits, never a duplicate
    dev = list(dataset.synthetic_cases(files, 10, "dev", dataset.DataConfig(edits_per_window=4)))
    assert dev == list(dataset.synthetic_cases(files, 10, "dev", dataset.DataConfig()))  # dev stays one per window
