"""`apply-snippet`: the snippet aligner alone (no model) on corpora: update snippets and unified
diffs merged exactly, merged wrongly, or refused by kind. Last stdout line: one JSON document."""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

from backend.cli.common import emit, format_table
from backend.cli.core_commands import _add_common, _corpora


def cmd_apply_snippet(args: argparse.Namespace) -> int:
    """The snippet aligner alone (no model) on every case whose instruction carries an update
    snippet or a unified diff: merged exactly, merged wrongly (the number that must stay near 0), or
    refused, by kind."""
    from backend.core.carried_edit import SnippetRefused, apply_carried_edit, carried_edit_kind
    from backend.core.edit_text import diff_instruction, snippet_from_diff

    document: dict[str, Any] = {"corpora": {}}
    rows = []
    for name, cases in _corpora(args.corpora, args.data_dir, args.limit):
        counts = collections.Counter()
        reasons: collections.Counter[str] = collections.Counter()
        wrong_ids = []
        started = time.perf_counter()
        for case in cases:
            instruction = case.instruction
            if args.from_diff is not None and args.as_diff:
                instruction = diff_instruction(case.source, case.target, context=args.from_diff)
            elif args.from_diff is not None:
                instruction = snippet_from_diff(case.source, case.target, context=args.from_diff,
                                                marker=_marker_for(case))
            if not instruction or carried_edit_kind(instruction) is None:
                continue
            try:
                merged = apply_carried_edit(case.source, instruction)
            except SnippetRefused as refusal:
                counts["refused"] += 1
                reasons[refusal.kind] += 1
                continue
            counts["exact" if merged == case.target else "wrong"] += 1
            if merged != case.target:
                wrong_ids.append(case.id)
        snippets = sum(counts.values())
        document["corpora"][name] = {
            "cases": len(cases), "snippets": snippets, "exact": counts["exact"], "wrong": counts["wrong"],
            "refused": counts["refused"], "refusals": dict(reasons.most_common()), "wrong_ids": wrong_ids,
            "seconds": time.perf_counter() - started,
        }
        rows.append([name, len(cases), snippets, counts["exact"], counts["wrong"], counts["refused"]])
    emit(format_table(["corpus", "cases", "with a snippet", "merged exactly", "merged wrongly", "refused"], rows),
         document)
    return 0


def _marker_for(case: Any) -> str:
    language = str(case.meta.get("language") or "")
    return "#" if language == "python" or case.id.startswith("humanevalpack-python") or \
        str(case.meta.get("file", "")).endswith(".py") else "//"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("apply-snippet", help="the snippet aligner alone (snippets, unified diffs) on corpora: exact, wrong, refused")
    p.add_argument("corpora", nargs="+", metavar="CORPUS", help="a corpus name or a case-format .jsonl path")
    p.add_argument("--limit", type=int, default=None, metavar="K", help="first K cases of each corpus")
    p.add_argument("--from-diff", type=int, default=None, metavar="N",
                   help="instead of each case's instruction, the update snippet of its own edit (source -> "
                   "target): every changed region with N unchanged lines around it, markers between")
    p.add_argument("--as-diff", action="store_true",
                   help="with --from-diff: the edit as a unified diff (N context lines) instead of a snippet")
    _add_common(p)
    p.set_defaults(handler=cmd_apply_snippet)
