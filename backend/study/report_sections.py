"""One section of report.md per stage, each drawn from the results document only."""

from __future__ import annotations

from typing import Any

from backend.study.report_comparison import (bound_explanation, coverage_explanation, perturbation_explanation,
                                             stop_reasons)
from backend.study.report_format import corpora_in, measured_tables, ok_text, pct, secs, table, times


def kernel_section(results: dict[str, Any]) -> str:
    out = ["## 1. Copy kernel: one forward of N tokens vs N decode steps", ""]
    for t in measured_tables(results):
        out.append(f"**{t['label']}** ({t.get('origin')}), context {t.get('context')} tokens, decode step "
                   f"{secs(t['step_seconds'])}, median of {t.get('repeats', '?')}:")
        out.append("")
        out.append(table(["N", "one forward", "N steps", "speed-up", "max abs logit diff"],
                         [[r["n"], secs(r["prefill_seconds"]), secs(r.get("steps_seconds")), times(r.get("speedup")),
                           f"{r.get('max_abs_logit_diff', float('nan')):.2g}"] for r in t["rows"]]))
        out.append("")
    if not any("cuda" in str(t.get("device")) for t in measured_tables(results)):
        out.append("No GPU kernel table is in this report. On a CUDA machine, `python -m backend study --kernel-only "
                   "--model qwen2.5-1.5b-shape --kernel-models qwen2.5-7b-shape --out gpu-kernel` measures one "
                   "(bf16, CUDA events), and `--extra-kernel gpu-kernel/results.json` merges it here.")
        out.append("")
    return "\n".join(out)


def ceiling_section(results: dict[str, Any]) -> str:
    section = results.get("ceiling")
    if not section:
        return ""
    out = ["## 2. Copy ceiling (coverage oracle programs)", ""]
    for tok_name, data in section["tokenizers"].items():
        rows = []
        for name in [*corpora_in(data["corpora"]), "pooled"]:
            c = data["pooled"] if name == "pooled" else data["corpora"][name]
            rows.append([name, c["line"]["cases"], c["line"]["gold_tokens"], pct(c["line"]["coverage"]),
                         c["line"]["copy_spans"], c["line"]["tag_tokens"], pct(c["token"]["coverage"]),
                         c["token"]["copy_spans"], c["token"]["tag_tokens"]])
        out += [f"**{tok_name} tokens**", "",
                table(["corpus", "cases", "gold tokens", "line coverage", "line spans", "line tag tokens",
                       "token coverage", "token spans", "token tag tokens"], rows), ""]
    variant = section.get("declaration_variant")
    if variant:
        out += ["HumanEvalPack with the declaration prepended to source and target (line coverage, qwen2.5): "
                + ", ".join(f"{n} {pct(v)}" for n, v in variant.items()), ""]
    return "\n".join(out)


def bound_section(results: dict[str, Any]) -> str:
    section = results.get("bound")
    if not section:
        return ""
    out = ["## 3. Closed-form wall-clock bound (cost oracle programs, copy cost fitted to each kernel)", ""]
    for b in section["tables"]:
        rows = []
        for name in [*corpora_in(b["corpora"]), "pooled"]:
            c = b["pooled"] if name == "pooled" else b["corpora"][name]
            rows.append([name, times(c["line"]["speedup"]), pct(c["line"]["coverage"]), secs(c["line"]["plain_seconds"]),
                         secs(c["line"]["copy_seconds"]), times(c["token"]["speedup"]), pct(c["token"]["coverage"])])
        out += [f"**{b['label']}** ({b['tokenizer']} tokens)", "",
                table(["corpus", "line bound", "line coverage", "T_plain", "T_copy", "token bound", "token coverage"], rows), ""]
    return "\n".join(out)


def replay_section(results: dict[str, Any]) -> str:
    replay = results.get("replay")
    if not replay:
        return ""
    out = ["## 4. Measured end-to-end: reference replay, copy-as-decode vs plain vs prompt lookup", "",
           f"Same model ({replay['model']}), same cases, same run. Subset: cases with at most "
           f"{replay['replay_max_tokens']} source and target tokens, "
           f"{'smallest first (--quick)' if replay.get('order') == 'shortest' else 'in a seeded order'}, the first {replay['limit']} per "
           f"HumanEvalPack corpus and {replay['long_limit']} per long corpus (commits, stdlib-probe): plain decoding "
           "of a 3,000-token file takes minutes on a CPU. Times exclude the prompt prefill (copy-as-decode's prompt "
           "numbers the input lines and carries few-shot examples, so it is longer than the plain prompt); the "
           "end-to-end column includes it.", ""]
    rows = []
    summaries = {**replay["corpora"], "pooled": replay["pooled"]}
    for name in [*corpora_in(replay["corpora"]), "pooled"]:
        s = summaries[name]
        if not s.get("speedup"):
            rows.append([name, s.get("cases", 0)] + ["-"] * 10)
            continue
        tuned = s.get("pld_tuned") or {}  # results from before the tuned run have none
        setting = (replay.get("tuned_by_corpus") or {}).get(name, {}).get("label")
        tuned_cell = secs(tuned.get("wall_seconds")) + (f" ({setting})" if setting else "") if tuned else "-"
        rows.append([name, s["timed_cases"], s["gold_tokens"], secs(s["ar"]["wall_seconds"]), secs(s["pld"]["wall_seconds"]),
                     tuned_cell, secs(s["cad"]["wall_seconds"]),
                     times(s["speedup"]["cad_vs_ar"]), times(s["speedup"]["pld_vs_ar"]), times(s["speedup"]["cad_vs_pld"]),
                     times(s["speedup"].get("cad_vs_pld_tuned")), times(s["speedup_end_to_end"]["cad_vs_ar"])])
    tuned_setting = replay.get("tuned_lookup", "-")
    if replay.get("tuned_by_corpus"):
        out += ["Tuned prompt lookup: per corpus, the setting of the 20-setting sweep (n-gram 1-4 x drafts 10-128) "
                "predicted fastest on that corpus's dev split (the next cases in the same order, not replayed, never timed "
                "here); its setting is shown beside its time.", ""]
    out += [table(["corpus", "cases", "gold tokens", "plain", "prompt lookup 2/10", f"prompt lookup tuned ({tuned_setting})",
                   "copy-as-decode", "cad vs plain", "pld vs plain", "cad vs pld", "cad vs tuned pld",
                   "cad vs plain, end to end"], rows), ""]
    out += measured_vs_bound(replay), ""
    out += [beats_pld(replay), ""]
    errors = [(c["id"], s, c[s]["error"]) for c in replay["cases"] for s in ("cad", "ar", "pld", "pld_tuned")
              if (c.get(s) or {}).get("error")]
    if errors:
        out += ["Failures during replay: " + "; ".join(f"{i} ({s}): {e}" for i, s, e in errors), ""]
    return "\n".join(out)


def measured_vs_bound(replay: dict[str, Any]) -> str:
    summaries = {**replay["corpora"], "pooled": replay["pooled"]}
    rows = []
    for name in [*corpora_in(replay["corpora"]), "pooled"]:
        v = summaries[name].get("vs_bound")
        if not v:
            continue
        rows.append([name, v["cases"], times(v["bound_speedup"]), times(v["measured_speedup"]), pct(v["fraction_of_bound"]),
                     f"{v['ar_vs_predicted']:.3g}" if v.get("ar_vs_predicted") else "n/a",
                     f"{v['cad_vs_predicted']:.3g}" if v.get("cad_vs_predicted") else "n/a",
                     v["cad_forwards"], v["tag_tokens"], v["jump_forward_tokens"], v["boundary_retokenized"]])
    if not rows:
        return "### Measured vs bound\n\nNo replayed case produced a program to bound."
    pooled = replay["pooled"].get("vs_bound") or {}
    text = ["### Measured vs bound", "",
            f"The bound for exactly the replayed programs, from {replay['kernel']} (the same model's kernel), against "
            "the measured speed-up. 'plain/predicted' and 'cad/predicted' are measured time over the bound's own "
            "prediction of it: above 1 means the real pipeline pays more than the kernel table says.", "",
            table(["corpus", "cases", "bound", "measured", "share of bound", "plain/predicted", "cad/predicted",
                   "cad forwards", "tag tokens", "jump-forward tokens", "boundary re-tokenised"], rows), ""]
    reasons = []
    if pooled:
        if pooled.get("ar_step_vs_kernel_step"):
            prompt = pooled.get("ar_prompt_tokens_mean")
            reasons.append(f"a plain decode step in the replay costs {pooled['ar_step_vs_kernel_step']:.3g}x the kernel "
                           f"table's step ({secs(pooled['measured_ar_seconds_per_token'])} vs {secs(pooled['kernel_step_seconds'])}): "
                           f"the kernel was timed after a fixed {pooled.get('kernel_context')}-token context, the replay "
                           f"after a prompt of {prompt:.0f} tokens on average plus its output, the replay's loop adds "
                           "Python work per token, and the two were timed minutes apart on the same machine"
                           if prompt is not None else
                           f"a plain decode step in the replay costs {pooled['ar_step_vs_kernel_step']:.3g}x the kernel table's step")
        if (pooled.get("fraction_of_bound") or 0) > 1:
            reasons.append("the measured speed-up exceeds the bound where jump-forward makes forced tag tokens free: "
                           "the bound charges every tag token a decode step")
        reasons.append(f"copy-as-decode decoded {pooled['tag_tokens']} tag tokens and "
                       f"{pooled['generated_tokens']} generated tokens and ran {pooled['cad_forwards']} forwards in all "
                       f"({secs(pooled.get('cad_seconds_per_forward'))} per forward, tag checks, grammar masks and "
                       "re-tokenisation included), where the bound charges only decode steps and one prefill per span")
        reasons.append(f"jump-forward appended {pooled['jump_forward_tokens']} forced tag tokens without decoding them "
                       "(a saving the bound does not count), and boundary re-tokenisation changed the tokens at "
                       f"{pooled['boundary_retokenized']} joins (each costs a rollback and a re-prefill)")
        cad_prompt, ar_prompt = pooled.get("cad_prompt_tokens_mean"), pooled.get("ar_prompt_tokens_mean")
        reasons.append("the prompt prefill is outside both the measured times and the bound"
                       + (f" (copy-as-decode's prompt averages {cad_prompt:.0f} tokens, the plain one {ar_prompt:.0f}: it "
                          "numbers the input lines and carries few-shot examples)" if cad_prompt and ar_prompt else "")
                       + "; end to end it dilutes every speed-up, the more so the shorter the output")
    text += ["Why the measured share differs from 100%: " + "; ".join(reasons) + "."]
    return "\n".join(text)


def beats_pld(replay: dict[str, Any]) -> str:
    summaries = {**replay["corpora"], "pooled": replay["pooled"]}
    wins, losses = [], []
    for name in corpora_in(replay["corpora"]):
        s = summaries[name]
        if not s.get("speedup") or s["speedup"]["cad_vs_pld"] is None:
            continue
        label = f"{name} ({times(s['speedup']['cad_vs_pld'])}, {s['cad_faster_than_pld_cases']}/{s['timed_cases']} cases)"
        (wins if s["speedup"]["cad_vs_pld"] > 1 else losses).append(label)
    cases = [c for c in replay["cases"] if c["cad"].get("wall_seconds") and c["pld"].get("wall_seconds")]
    faster = [c for c in cases if c["cad"]["wall_seconds"] < c["pld"]["wall_seconds"]]
    slower = [c for c in cases if c not in faster]

    def median_gold(items: list[dict[str, Any]]) -> str:
        if not items:
            return "n/a"
        values = sorted(c["gold_tokens"] for c in items)
        return str(values[len(values) // 2])

    def gen_share(items: list[dict[str, Any]]) -> str:
        bounded = [c for c in items if c.get("bound")]
        gold = sum(c["gold_tokens"] for c in bounded)
        gen = sum(c["bound"]["generated_tokens"] + c["bound"]["tag_tokens"] for c in bounded)
        return pct(gen / gold) if gold else "n/a"

    pld_fwd = sum(c["pld"].get("forwards") or 0 for c in cases)
    cad_fwd = sum(c["cad"].get("forwards") or 0 for c in cases)
    return "\n".join([
        "### Where copy-as-decode beats prompt-lookup decoding, and where it does not", "",
        f"- Copy-as-decode is faster on: {', '.join(wins) or 'no corpus'}.",
        f"- Prompt lookup is faster (or equal) on: {', '.join(losses) or 'no corpus'}.",
        f"- Per case: copy-as-decode wins {len(faster)} of {len(cases)}. Median gold tokens where it wins: "
        f"{median_gold(faster)}, where it loses: {median_gold(slower)}; decoded (generated + tag) tokens as a share of "
        f"gold: {gen_share(faster)} where it wins, {gen_share(slower)} where it loses.",
        f"- Forwards in all: copy-as-decode {cad_fwd}, prompt lookup {pld_fwd}. Prompt lookup checks a bounded "
        "number of draft tokens per forward and pays one forward per mismatch, with no tags; a copy moves a whole "
        "span in one forward but pays its tag tokens. Long files with small edits favour copies; short outputs, "
        "where tags are a large share of the tokens and drafts rarely miss, favour prompt lookup.",
    ])


def losslessness_section(results: dict[str, Any]) -> str:
    loss = results.get("losslessness")
    if not loss:
        return ""
    limit = results.get("config", {}).get("ceiling_limit")
    scope = f"the first {limit} cases of each corpus (--quick)" if limit else "every case of every corpus"
    out = ["## 5. Losslessness", "",
           f"Coverage oracle programs rendered to text, parsed and resolved ({scope}), line and token granularity:", ""]
    rows = []
    for tok_name, data in loss["resolver"]["tokenizers"].items():
        for name in [*corpora_in(data["corpora"]), "pooled"]:
            c = data["pooled"] if name == "pooled" else data["corpora"][name]
            rows.append([tok_name, name, ok_text(c["line"]), ok_text(c["token"]), len(c.get("failures", []))])
    out += [table(["tokenizer", "corpus", "line programs exact", "token programs exact", "failures"], rows), ""]
    model = loss["model"]["corpora"]
    out += ["Through the model (reference replay, output compared byte for byte with the target):", "",
            table(["corpus", "copy-as-decode", "plain", "prompt lookup"],
                  [[n, ok_text(model[n]["cad"]), ok_text(model[n]["ar"]), ok_text(model[n]["pld"])]
                   for n in [*corpora_in(model), "pooled"]]), ""]
    return "\n".join(out)


def perturbation_section(results: dict[str, Any]) -> str:
    section = results.get("perturbation")
    if not section:
        return ""
    names = [*corpora_in(section["corpora"]), "pooled"]
    series = {**section["corpora"], "pooled": section["pooled"]}
    rows = [[f"{rate:g}"] + [pct(series[n][i]["exact_rate"]) for n in names] for i, rate in enumerate(section["rates"])]
    return "\n".join(["## 6. Perturbation: each copy boundary shifted by one line with probability p", "",
                      table(["p"] + names, rows), "", perturbation_explanation(results), ""])


def boundary_section(results: dict[str, Any]) -> str:
    section = results.get("boundary")
    if not section:
        return ""
    rows = [[n, c["cases"], c["copies"], c["boundary_retokenized"], pct(c["rate"]), c["jump_forward_tokens"],
             c["tag_tokens"], pct(c["jump_forward_share_of_tag_tokens"])]
            for n, c in ((n, section["corpora"][n]) for n in [*corpora_in(section["corpora"]), "pooled"])]
    mm = section.get("model_mode", {})
    return "\n".join(["## 7. Boundary re-tokenisation and jump-forward (replayed copy-as-decode runs)", "",
                      table(["corpus", "cases", "copies", "joins re-tokenised", "rate", "jump-forward tokens (steps saved)",
                             "tag tokens", "share of tag tokens jumped"], rows), "",
                      f"In model mode: {mm.get('boundary_retokenized', 0)} joins re-tokenised, "
                      f"{mm.get('jump_forward_tokens', 0)} tokens jumped over {mm.get('cases', 0)} cases.", ""])


def model_mode_section(results: dict[str, Any]) -> str:
    mm = results.get("model_mode")
    if not mm:
        return ""
    rows = [[c["id"], "yes" if c["valid"] else "no", "yes" if c["exact"] else "no", c["stop_reason"],
             (c["metrics"] or {}).get("tokens_copied", "?"), (c["metrics"] or {}).get("tokens_generated", "?"),
             secs(c["seconds"])] for c in mm["cases"]]
    return "\n".join([
        "## 8. The model writing programs itself (no reference)", "",
        f"{mm['model']}, greedy, at most {mm['max_new_tokens']} new tokens, constrained decoding, HumanEvalPack "
        "cases (Python and JS alternating, seeded). Valid = the program ended (EOS) within the cap and resolved "
        f"without error: {mm['valid']}/{mm['sample']} ({pct(mm['validity_rate'])}; {stop_reasons(mm)}), exact match {mm['exact']}/{mm['sample']} "
        f"({pct(mm['exact_match'])}); {mm['copied_any']} of {mm['sample']} programs copy anything. "
        "This is the base model (the study's 12-17% is after fine-tuning a 1.5B coder); the adapter fine-tuned on "
        "this CPU is evaluated on held-out cases by `python -m backend evaluate` (adapters/smollm2-135m-cad/TRAINING_CARD.md).", "",
        table(["case", "valid", "exact", "stop", "tokens copied", "tokens generated", "time"], rows), ""])


def durations_section(results: dict[str, Any]) -> str:
    stages = results.get("stages", {})
    rows = [[name, secs(s.get("seconds")), s.get("note", "")] for name, s in stages.items()]
    return "\n".join(["## Run time", "", table(["stage", "duration", "note"], rows), "",
                      f"Whole run: {secs(results.get('duration_seconds'))}.", ""])


def figures_section(results: dict[str, Any]) -> str:
    figures = results.get("figures", {})
    files = figures.get("files", {})
    if not files:
        return ""
    out = ["## Figures", ""]
    if not figures.get("png"):
        out += [f"PNG export unavailable: {figures.get('png_error')}. The HTML figures are complete.", ""]
    for name, paths in files.items():
        if paths.get("png"):
            out.append(f"![{name}]({paths['png']})")
        out.append(f"[{name} (interactive HTML)]({paths['html']})")
        out.append("")
    return "\n".join(out)


def runtimes_section(results: dict[str, Any]) -> str:
    section = results.get("runtimes")
    if not section:
        return ""
    steps = ", ".join(f"{rt} {secs(r['step_seconds'])}" for rt, r in section["runtimes"].items())
    out = ["### The same replay on each CPU runtime", "",
           f"The replay's cases again on each runtime in this run (plain decode step, median of 31: {steps}). Seconds "
           "are summed over the cases every strategy replayed exactly on every runtime; 'x' is against the fastest "
           "runtime's plain decoding, what a CPU user would pick instead.", ""]
    rows = []
    for corpus in corpora_in(section.get("corpora", {})):
        entry = section["corpora"][corpus]
        for rt, seconds in entry["seconds"].items():
            rows.append([corpus, entry["cases"], rt] + [f"{secs(seconds[s])} ({times(entry['vs_fastest_plain'].get(f'{rt}/{s}'))})"
                                                       for s in ("ar", "pld", "pld_tuned", "cad")])
    if rows:
        out += [table(["corpus", "cases", "runtime", "plain", "pld (2/10)", "pld tuned", "copy-as-decode"], rows), ""]
    for rt, reason in section.get("skipped", {}).items():
        out.append(f"Runtime {rt} did not run here: {reason}")
    return "\n".join(out)
