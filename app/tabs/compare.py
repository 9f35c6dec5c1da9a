"""The Compare tab: plain decoding, prompt lookup (at transformers' defaults and tuned) and
copy-as-decode on one input, one after another.

Prompt lookup runs twice because a user would tune it: the peer at its best is the comparison that
matters (issue 10), the defaults show what an untuned setup gets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from app import charts
from app.present import STRATEGY_LABELS, changed_nothing, exact_source, is_unchanged, spans_value, stop_reason
from app.progress import Snapshot
from app.service import AppService, InputError, PreparedRun, RunRequest
from app.tabs.common import COLOUR_MAP, LEGEND, api_event, run_concurrency, session_key, ui_event
from app.tabs.waiting import run_in_turn
from backend.runtime.prompt_lookup import DEFAULT_LOOKUP, lookup_label
from backend.storage import EditRecord, StorageError

PANES = ("ar", "pld", "pld-tuned", "cad")  # one pane per run; "pld-tuned" is prompt lookup at the tuned setting
COMPARE_HEADERS = [
    "strategy", "wall s", "forwards", "tokens/s", "output tokens", "copied", "generated", "tag",
    "speed-up vs plain (per output token)", "stop", "produced target", "edit",
]


def compare_row(strategy: str, metrics: dict[str, Any], *, stop: str, mode: str, produced_target: bool,
                edit_id: int | None, unchanged: bool = False) -> dict[str, Any]:
    """One strategy's row; `unchanged`: a model-mode output equal to the input (the edit not made)."""
    lookup = metrics.get("lookup")
    return {
        "strategy": strategy, "lookup": lookup,
        "label": STRATEGY_LABELS[strategy] + (f" {lookup}" if strategy == "pld" and lookup else ""),
        "wall_seconds": float(metrics.get("elapsed_seconds") or 0.0),
        "forwards": int(metrics.get("forwards") or 0),
        "tokens_per_second": float(metrics.get("tokens_per_second") or 0.0),
        "output_tokens": int(metrics.get("output_tokens") or 0), "tokens_copied": int(metrics.get("tokens_copied") or 0),
        "tokens_generated": int(metrics.get("tokens_generated") or 0), "tokens_tag": int(metrics.get("tokens_tag") or 0),
        "stop": stop, "produced_target": produced_target, "mode": mode, "edit_id": edit_id, "unchanged": unchanged,
    }


def _per_token(row: dict[str, Any]) -> float | None:
    return row["wall_seconds"] / row["output_tokens"] if row["output_tokens"] and row["wall_seconds"] > 0 else None


def compare_table(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """Speed-up is plain decoding's seconds per output token over this strategy's: outputs of
    different lengths (model mode) compare fairly."""
    plain = next((_per_token(r) for r in rows if r["strategy"] == "ar"), None)
    table = []
    for r in rows:
        mine = _per_token(r)
        speedup = f"{plain / mine:.2f}×" if plain and mine else "—"
        if r["mode"] == "reference":
            target = "✓ yes" if r["produced_target"] else "✗ no"
        else:
            target = "✗ changed nothing" if r.get("unchanged") else "(model mode)"
        table.append([
            r["label"], round(r["wall_seconds"], 3), r["forwards"], round(r["tokens_per_second"], 1),
            r["output_tokens"], r["tokens_copied"], r["tokens_generated"], r["tokens_tag"], speedup, r["stop"], target,
            r["edit_id"],
        ])
    return table


def length_note(rows: list[dict[str, Any]]) -> str:
    """Says so when the outputs differ in length (the speed-up is then per output token)."""
    lengths = {r["label"]: r["output_tokens"] for r in rows}
    if len(set(lengths.values())) <= 1:
        return ""
    listed = ", ".join(f"{label} {n}" for label, n in lengths.items())
    return f" · the outputs differ ({listed} tokens): speed-up is per output token"


class CompareTab:
    def __init__(self, service: AppService, model: gr.Dropdown) -> None:
        self.service = service
        self.model = model

    def build(self) -> None:
        limits = self.service.limits
        with gr.Tab("Compare", id="compare", elem_id="compare-panel"):
            gr.Markdown("One input through **plain decoding**, **prompt lookup** and **copy-as-decode**, one after "
                        "another on the same model, so their timings do not disturb each other.")
            with gr.Row():
                with gr.Column(scale=5):
                    self.source = gr.Textbox(label="Input", lines=10, max_lines=24, elem_id="cmp-input", elem_classes=["mono"])
                    self.copy_button = gr.Button("Use the Edit tab's input", size="sm", elem_id="cmp-copy")
                    self.uploaded = gr.State(None)
                with gr.Column(scale=5):
                    self.instruction = gr.Textbox(label="Instruction", lines=2, elem_id="cmp-instruction")
                    self.mode = gr.Radio(
                        choices=[("model", "model"), ("reference (all three must produce the target)", "reference")],
                        value="model", label="Mode", elem_id="cmp-mode",
                    )
                    self.target = gr.Textbox(label="Desired result (reference mode)", lines=6, max_lines=24,
                                             visible=False, elem_id="cmp-target", elem_classes=["mono"])
                    self.max_tokens = gr.Slider(1, limits.max_new_tokens,
                                                value=min(limits.default_new_tokens, limits.max_new_tokens), step=1,
                                                label="Max new tokens", elem_id="cmp-max-tokens")
                    with gr.Row():
                        self.run_button = gr.Button("Run comparison", variant="primary", elem_id="cmp-run")
                        self.cancel_button = gr.Button("Cancel", variant="stop", elem_id="cmp-cancel", interactive=False)
            gr.HTML(LEGEND)
            self.timers: dict[str, gr.Textbox] = {}
            self.streams: dict[str, gr.HighlightedText] = {}
            with gr.Row(equal_height=False):
                for pane in PANES:
                    title = self.pane_title(pane)
                    with gr.Column(min_width=220, elem_id=f"cmp-pane-{pane}"):
                        gr.Markdown(f"**{title}**")
                        self.timers[pane] = gr.Textbox(value="—", label="timer", interactive=False,
                                                       elem_id=f"cmp-{pane}-timer")
                        self.streams[pane] = gr.HighlightedText(
                            label=title, color_map=COLOUR_MAP, show_legend=False,
                            show_inline_category=False, elem_id=f"cmp-{pane}-stream", elem_classes=["mono"],
                            interactive=False,
                        )
            self.status = gr.Textbox(label="Status", interactive=False, elem_id="cmp-status")
            self.table = gr.Dataframe(headers=COMPARE_HEADERS, value=[], datatype="str", type="array",
                                      interactive=False, elem_id="cmp-table", label="Results")
            self.chart = gr.Plot(label="Wall time, forward passes, tokens/s", elem_id="cmp-chart")

    @property
    def outputs(self) -> list[Any]:
        panes = [c for s in PANES for c in (self.streams[s], self.timers[s])]
        return [*panes, self.table, self.chart, self.cancel_button, self.status]

    @property
    def form(self) -> list[Any]:
        return [self.source, self.uploaded, self.instruction, self.mode, self.target]

    def wire(self, edit: Any, after_run: Any) -> None:
        ui_event(self.copy_button.click, self.copy_from_edit,
                 [edit.source, edit.uploaded, edit.instruction, edit.mode, edit.target], self.form)
        ui_event(self.mode.change, lambda mode: {self.target: gr.update(visible=mode == "reference")},
                 [self.mode], [self.target], queue=False)
        run = api_event(
            self.run_button.click, self.run,
            [self.model, self.source, self.instruction, self.mode, self.target, self.max_tokens, self.uploaded],
            self.outputs, name="compare", show_progress="minimal", **run_concurrency(self.service.config.max_waiting),
        )
        after_run(run)
        ui_event(self.cancel_button.click, self.cancel, [], [self.status], queue=False)

    def copy_from_edit(self, source: str, uploaded: str | None, instruction: str, mode: str, target: str) -> dict[Any, Any]:
        exact = exact_source(source, uploaded)
        return {self.source: exact, self.uploaded: exact, self.instruction: instruction, self.mode: mode,
                self.target: gr.update(value=target, visible=mode == "reference")}

    def cancel(self, request: gr.Request = None) -> dict[Any, Any]:  # type: ignore[assignment]
        if self.service.cancel(session_key(request)):
            return {self.status: "cancelling… the partial results will be kept"}
        return {}

    def _prepare(self, raw: RunRequest) -> dict[str, PreparedRun]:
        """One prepared run per pane (each prompt must fit the context too)."""
        base = self.service.prepare(raw)
        runs = {pane: self.service.with_strategy(base, "pld" if pane == "pld-tuned" else pane, lookup=self.pane_lookup(pane))
                for pane in PANES if pane != "cad"}
        return {**runs, "cad": base}

    def pane_lookup(self, pane: str) -> tuple[int, int] | None:
        """Prompt lookup's (n-gram, drafts) for a pane; None for the others."""
        return {"pld": DEFAULT_LOOKUP, "pld-tuned": tuple(self.service.config.tuned_lookup)}.get(pane)  # type: ignore[return-value]

    def pane_title(self, pane: str) -> str:
        lookup = self.pane_lookup(pane)
        if lookup is None:
            return f"{STRATEGY_LABELS[pane]} ({pane})"
        which = "transformers' defaults" if pane == "pld" else "tuned"
        return f"prompt lookup {lookup_label(lookup)} ({which})"

    def pane_of(self, strategy: str, metrics: dict[str, Any]) -> str:
        """The pane a stored run belongs in: prompt lookup by its setting (older runs: the defaults)."""
        if strategy == "pld" and metrics.get("lookup") == lookup_label(self.service.config.tuned_lookup) \
                and tuple(self.service.config.tuned_lookup) != DEFAULT_LOOKUP:
            return "pld-tuned"
        return strategy

    def run(self, model: str, source: str, instruction: str, mode: str, target: str | None, max_new_tokens: Any,
            uploaded: str | None = None, request: gr.Request = None,  # type: ignore[assignment]
            ) -> Iterator[dict[Any, Any]]:
        service = self.service
        raw = RunRequest(model=model or service.default_model, source=exact_source(source, uploaded),
                         instruction=instruction or "", mode=mode or "model", target=target or None,
                         max_new_tokens=max_new_tokens)
        try:
            runs = self._prepare(raw)
        except InputError as error:
            yield {self.status: str(error)}
            return
        yield from run_in_turn(service, session_key(request), status=self.status, cancel_button=self.cancel_button,
                               body=lambda cancel: self._run_all(runs, cancel))

    def _run_all(self, runs: dict[str, PreparedRun], cancel: Any) -> Iterator[dict[Any, Any]]:
        base = runs["cad"]
        try:
            session = self.service.new_session(base, kind="compare")
        except StorageError as error:
            yield {self.status: str(error), self.cancel_button: gr.update(interactive=False)}
            return
        blank = {**{self.streams[s]: [] for s in PANES}, **{self.timers[s]: "waiting" for s in PANES}}
        yield {**blank, self.table: [], self.chart: None, self.cancel_button: gr.update(interactive=True),
               self.status: "running plain decoding, prompt lookup (defaults, tuned), copy-as-decode in turn…"}
        rows: list[dict[str, Any]] = []
        for pane in PANES:
            if cancel.is_set():
                yield {self.timers[pane]: "skipped (cancelled)"}
                continue
            final: Snapshot | None = None
            for snap in self.service.stream_run(runs[pane], session_id=session.id, cancel=cancel):
                final = snap
                yield {self.streams[pane]: spans_value(snap.spans), self.timers[pane]: _timer(snap)}
            if final is not None:
                rows.append({**self._row(final, base), "pane": pane})
                yield {self.table: compare_table(rows)}
        status = f"compared {len(rows)} runs · session #{session.id}" + length_note(rows)
        if base.request.mode == "reference":
            ok = [r["pane"] for r in rows if r["produced_target"]]
            status += f" · produced the target: {', '.join(ok) if ok else 'none'} of {len(rows)}"
        if cancel.is_set():
            status += " · cancelled (partial results kept)"
        yield {self.table: compare_table(rows), self.chart: charts.comparison(rows), self.status: status,
               self.cancel_button: gr.update(interactive=False)}

    @staticmethod
    def _row(snap: Snapshot, run: PreparedRun) -> dict[str, Any]:
        edit: EditRecord | None = snap.extra.get("edit")
        request = run.request
        return compare_row(snap.strategy, snap.metrics, stop=stop_reason(snap), mode=request.mode,
                           produced_target=request.mode == "reference" and snap.output == request.target,
                           edit_id=edit.id if edit else None,
                           unchanged=is_unchanged(snap, request.mode, request.source))

    def show_stored(self, session_id: int, edits: list[EditRecord], spans: Any) -> dict[Any, Any]:
        first = edits[0]
        update: dict[Any, Any] = {
            self.source: first.input, self.uploaded: first.input, self.instruction: first.instruction,
            self.mode: first.mode, self.target: gr.update(value=first.target or "", visible=first.mode == "reference"),
        }
        rows = []
        for edit in edits:
            m = edit.metrics
            pane = self.pane_of(edit.strategy, m)
            update[self.streams[pane]] = spans(edit)
            update[self.timers[pane]] = (
                f"stored: {float(m.get('elapsed_seconds') or 0):.2f} s · {m.get('output_tokens', 0)} tokens · "
                f"{m.get('forwards', 0)} forwards ({edit.stop_reason})"
            )
            rows.append({**compare_row(edit.strategy, m, stop=edit.stop_reason, mode=edit.mode,
                                       produced_target=edit.mode == "reference" and edit.output == edit.target,
                                       edit_id=edit.id, unchanged=changed_nothing(edit.mode, edit.output, edit.input)),
                         "pane": pane})
        update.update({self.table: compare_table(rows), self.chart: charts.comparison(rows),
                       self.status: f"stored comparison #{session_id}" + length_note(rows)})
        return update

    @property
    def stored_outputs(self) -> list[Any]:
        return [*self.form, *self.outputs]


def _timer(snap: Snapshot) -> str:
    m = snap.metrics
    timer = f"{m['elapsed_seconds']:.2f} s · {m['output_tokens']} tokens · {m['forwards']} forwards"
    if snap.done:
        return f"done: {timer} ({stop_reason(snap)})"
    if not snap.spans and not m["forwards"]:
        return f"reading the prompt… {snap.wall_seconds:.1f} s"
    return f"running: {timer}"
