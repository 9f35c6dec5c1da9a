"""The report's side-by-side table: each published figure, ours, and why they differ."""

from __future__ import annotations

from typing import Any

from backend.study.published import PUBLISHED
from backend.study.report_format import SHORT, corpora_in, kernel_row, measured_tables, ok_text, pct, table, times


# --- the comparison table ------------------------------------------------------------------------

def comparison_rows(results: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    tables = measured_tables(results)

    # 1. kernel
    rows.append(_kernel_row(tables))
    for row_maker in (_coverage_rows, _bound_rows, _roundtrip_rows, _perturbation_rows, _model_mode_rows,
                      _replay_rows):
        rows += row_maker(results)
    return rows


def _kernel_row(tables: list[dict[str, Any]]) -> list[str]:
    """The copy kernel's speed-up row, always present ("not run" without kernel tables)."""
    ours, why = [], []
    for t in tables:
        lo, hi = kernel_row(t, min(r["n"] for r in t["rows"])), kernel_row(t, max(r["n"] for r in t["rows"]))
        ours.append(f"{t['label']}: {times(lo['speedup'])} (N={lo['n']}) to {times(hi['speedup'])} (N={hi['n']})"
                    + (f" [{t['origin']}]" if t.get("origin") != "measured in this run" else ""))
        growth = hi["prefill_seconds"] / lo["prefill_seconds"]
        per_step = lo["prefill_seconds"] / t["step_seconds"]
        why.append(f"{t['label']}: one forward of {hi['n']} tokens costs {growth:.3g}x one of {lo['n']} "
                   f"(flat = 1x, no parallel gain = {hi['n'] / lo['n']:.0f}x), and one forward of {lo['n']} tokens "
                   f"costs {per_step:.3g} decode steps")
    published = PUBLISHED["kernel_speedup"]
    return ["Copy kernel speed-up, N = 8..512", f"{published['low']}x-{published['high']:.0f}x", "; ".join(ours) or "not run",
            "Speed-up at N = N x step / forward(N): it is as large as the forward's cost is flat in N. A GPU "
            "decode step is memory-bound, so a forward of hundreds of tokens costs little more than one token; on "
            "a few CPU cores the arithmetic grows with N once the cores are busy, so the curve bends early. "
            "Smaller models (135M here vs 1.5B/7B) also have less weight traffic per step to amortise. Measured: "
            + "; ".join(why) + "."]


def _coverage_rows(results: dict[str, Any]) -> list[list[str]]:
    """Line- and token-copy coverage rows, from the ceiling stage (none when it did not run)."""
    ceiling = results.get("ceiling", {}).get("tokenizers", {})
    if not ceiling:
        return []
    rows: list[list[str]] = []
    q = "qwen2.5" if "qwen2.5" in ceiling else next(iter(ceiling))
    corpora = ceiling[q]["corpora"]
    for key, granularity, label in (("line_coverage", "line", "Line-copy coverage (gold tokens reachable)"),
                                    ("token_coverage", "token", "Token-copy coverage")):
        ours_text = ", ".join(f"{SHORT.get(n, n)} {pct(corpora[n][granularity]['coverage'])}" for n in corpora_in(corpora))
        ours_text += f"; pooled {pct(ceiling[q]['pooled'][granularity]['coverage'])} ({q} tokens)"
        rows.append([label, f"{100 * PUBLISHED[key]['low']:.0f}-{100 * PUBLISHED[key]['high']:.0f}%", ours_text,
                     coverage_explanation(results, q, granularity)])
    return rows


def _bound_rows(results: dict[str, Any]) -> list[list[str]]:
    """The closed-form wall-clock bound row, from the bound stage (none when it did not run)."""
    bound = results.get("bound", {}).get("tables", [])
    if not bound:
        return []
    parts = []
    for b in bound:
        values = [b["corpora"][n]["line"]["speedup"] for n in corpora_in(b["corpora"])]
        values = [v for v in values if v]
        if values:
            parts.append(f"{b['label']}: {times(min(values))}-{times(max(values))} ({times(b['pooled']['line']['speedup'])} pooled)")
    return [["Closed-form wall-clock bound (line copies)",
             f"{PUBLISHED['bound']['low']}x-{PUBLISHED['bound']['high']:.0f}x ({PUBLISHED['bound']['pooled']:.0f}x pooled)",
             "; ".join(parts), bound_explanation(results)]]


def _roundtrip_rows(results: dict[str, Any]) -> list[list[str]]:
    """The losslessness row: tokenizer round trips, plus the model's reference replay when it ran."""
    trip = results.get("roundtrip", {}).get("tokenizers", {})
    if not trip:
        return []
    parts = [f"{name}: line {ok_text(t['pooled']['line'])}, token {ok_text(t['pooled']['token'])}" for name, t in trip.items()]
    model = results.get("losslessness", {}).get("model", {}).get("corpora", {}).get("pooled")
    if model:
        parts.append(f"through the model (reference replay): copy-as-decode {ok_text(model['cad'])}, "
                     f"plain {ok_text(model['ar'])}, prompt lookup {ok_text(model['pld'])}")
    cases = sum(c["cases"] for c in results.get("corpora", {}).values())
    return [["Oracle programs round-trip losslessly", f"all {PUBLISHED['roundtrip']['cases']} cases",
             "; ".join(parts),
             f"Our corpora hold {cases} cases (the study's probe set is unpublished; stdlib-probe stands in for it, "
             "and the commits corpus is extra)"
             + (f"; this run checked the first {results['config']['ceiling_limit']} per corpus (--quick)"
                if results.get("config", {}).get("ceiling_limit") else "")
             + ". A round trip renders the program to text, parses it and resolves it."]]


def _perturbation_rows(results: dict[str, Any]) -> list[list[str]]:
    """The span-noise row, from the perturbation stage (none when it did not run)."""
    perturb = results.get("perturbation")
    if not perturb:
        return []
    pooled = perturb["pooled"]
    ours_text = ", ".join(f"p={r['rate']:g}: {pct(r['exact_rate'])}" for r in pooled)
    return [["Exact match under off-by-one span noise", "100% -> 15.5%", f"pooled {ours_text}",
             perturbation_explanation(results)]]


def _model_mode_rows(results: dict[str, Any]) -> list[list[str]]:
    """The model-writes-programs row, from the model-mode stage (none when it did not run)."""
    mm = results.get("model_mode")
    if not mm:
        return []
    return [["Fix exact match of a model writing programs itself",
             "0% before, 12-17% after fine-tuning a 1.5B coder",
             f"{results['model'].get('label') or results['model']['name']}, not fine-tuned: exact {mm['exact']}/{mm['sample']} "
             f"({pct(mm['exact_match'])}), complete valid programs {mm['valid']}/{mm['sample']} ({stop_reasons(mm)})",
             "This row measures the base model (a 135M general instruct model taught the program language only by "
             "the few-shot prompt), so the comparable published number is the 'before' one. The LoRA adapter trained "
             "on this CPU (adapters/smollm2-135m-cad, the app's default) is measured on held-out cases by "
             "`python -m backend evaluate` (its TRAINING_CARD.md). The constrained decoder keeps every prefix a valid, "
             "in-range program; a program counts as valid only if it also ends (EOS) within the token cap."]]


def _replay_rows(results: dict[str, Any]) -> list[list[str]]:
    """The measured end-to-end replay row (ours only; the study reports bounds)."""
    replay = results.get("replay", {}).get("pooled", {})
    if not replay.get("speedup"):
        return []
    vs = replay.get("vs_bound", {})
    return [["Measured end-to-end replay (not in the study)", "not reported (the study gives bounds)",
             f"copy-as-decode {times(replay['speedup']['cad_vs_ar'])} vs plain, prompt lookup "
             f"{times(replay['speedup']['pld_vs_ar'])} vs plain, copy-as-decode vs prompt lookup "
             f"{times(replay['speedup']['cad_vs_pld'])}; {pct(vs.get('fraction_of_bound'))} of the bound for the same programs",
             "See 'Measured vs bound' below for where the rest goes."]]


def stop_reasons(mm: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for case in mm["cases"]:
        counts[case["stop_reason"]] = counts.get(case["stop_reason"], 0) + 1
    return "stopped by " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if counts else "no cases"


def coverage_explanation(results: dict[str, Any], tokenizer: str, granularity: str) -> str:
    corpora = results["ceiling"]["tokenizers"][tokenizer]["corpora"]
    published = PUBLISHED["line_coverage" if granularity == "line" else "token_coverage"]
    below, above = [], []
    for name in corpora_in(corpora):
        value = corpora[name][granularity]["coverage"]
        if value is not None and value < published["low"]:
            below.append(SHORT.get(name, name))
        elif value is not None and value > published["high"]:
            above.append(SHORT.get(name, name))
    text = ("Same tokenizer (Qwen2.5) and HumanEvalPack-Fix data (source = buggy, target = canonical solution, "
            "no declaration prepended); the probe set differs (ours: stdlib-probe, one small edit in a 300-1500-line "
            "file) and commits is extra. A gold token counts as copied when its first character lies in a copied "
            "segment; the study's exact accounting may differ. ")
    variant = results.get("ceiling", {}).get("declaration_variant", {})
    if granularity == "line" and variant:
        text += ("With the declaration prepended to both sides: "
                 + ", ".join(f"{SHORT.get(n, n)} {pct(v)}" for n, v in variant.items() if v is not None) + ". ")
    if below:
        text += (f"Below the published range: {', '.join(below)}. "
                 + median_gold_note(results, tokenizer, below))
    if above:
        text += (f"Above it: {', '.join(above)}: long files with one small edit, where nearly every line is "
                 "unchanged (the published range includes a probe set of its own, not these corpora). ")
    return text.strip()


def median_gold_note(results: dict[str, Any], tokenizer: str, names: list[str]) -> str:
    corpora = results["ceiling"]["tokenizers"][tokenizer]["corpora"]
    parts = []
    for name, c in corpora.items():
        if SHORT.get(name, name) in names and c["line"]["cases"]:
            parts.append(f"{SHORT.get(name, name)} targets average {c['line']['gold_tokens'] / c['line']['cases']:.0f} tokens")
    return ("; ".join(parts) + ": in short functions the changed line is a large share of the gold tokens, "
            "and a line that differs at all is not copied. ") if parts else ""


def bound_explanation(results: dict[str, Any]) -> str:
    bound = results["bound"]["tables"]
    texts = []
    for b in bound:
        pooled = b["pooled"]["line"]
        texts.append(f"{b['label']}: line coverage of the cost programs {pct(pooled['coverage'])}, "
                     f"copy fitted as {b['cost_model']['copy_fixed']:.3g} + {b['cost_model']['copy_per_token']:.3g}*N steps"
                     + (f" (1/b = {1 / b['cost_model']['copy_per_token']:.3g}x)" if b['cost_model']['copy_per_token'] > 0 else ""))
    return ("The bound is T_plain/T_copy with T_plain = gold x step and T_copy = (generated + tag) x step + "
            "sum of prefill(span): it grows with coverage and with the kernel's speed-up at the corpus's span lengths. "
            "Long files with one small edit (commits, stdlib-probe) have long spans and high bounds; short "
            "HumanEvalPack functions have short spans and tag overhead. A copied token that costs b decode steps "
            "(the fitted slope) caps the bound near 1/b on copy-dominated corpora; a GPU's slope is near 0. "
            + "; ".join(texts) + ".")


def perturbation_explanation(results: dict[str, Any]) -> str:
    pooled = results["perturbation"]["pooled"]
    return ("Each copy boundary moves by one line with probability p (both ends independently, seeded). The study's "
            "noise rate is not stated in our source, so we report a curve; rate 0 is 100% by construction. "
            f"At p=1 every boundary moves; exact match stays above 0 only where the shifted line equals its neighbour "
            f"(blank lines, closing brackets): pooled {pct(pooled[-1]['exact_rate'])} at p={pooled[-1]['rate']:g}.")
