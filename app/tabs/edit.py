"""The Edit tab: one edit, streamed, with metrics, program, diff, chart and an exact download."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from app import charts
from app.present import (
    METRIC_NAMES,
    adopt_line_endings,
    changed_nothing,
    exact_source,
    finish_text,
    format_metrics,
    is_failure,
    is_unchanged,
    line_endings,
    spans_value,
    unified_diff,
)
from app.service import AppService, InputError, PreparedRun, RunRequest
from app.tabs.common import COLOUR_MAP, LEGEND, api_event, run_concurrency, session_key, ui_event
from app.tabs.waiting import run_in_turn
from backend.storage import EditRecord, StorageError

CHART_EVERY_S = 2.0  # redraw the plotly chart at most this often while streaming (redraws cost browser CPU)
METRIC_LABELS = {
    "elapsed": "elapsed", "rate": "tokens / s", "plain": "plain decoding (est.)", "speedup": "speed-up (est.)",
    "copied": "tokens copied", "generated": "tokens generated", "tag": "tag tokens (forced ones too)",
    "forwards": "forward passes",
}


class EditTab:
    def __init__(self, service: AppService, model: gr.Dropdown) -> None:
        self.service = service
        self.model = model

    # -- layout --------------------------------------------------------------------------------

    def build(self) -> None:
        limits = self.service.limits
        with gr.Tab("Edit", id="edit", elem_id="edit-panel"):
            with gr.Row():
                with gr.Column(scale=5, min_width=320):
                    self._build_inputs(limits)
                with gr.Column(scale=7, min_width=360):
                    self._build_outputs()
            self.uploaded = gr.State(None)
            self.upload_name = gr.State(None)
            self.target_uploaded = gr.State(None)

    def _build_inputs(self, limits: Any) -> None:
        self.source = gr.Textbox(
            label="Input (paste text or code)", lines=14, max_lines=30, elem_id="edit-input",
            elem_classes=["mono"], placeholder="def greet(name):\n    print('hi ' + name)\n",
        )
        self.upload = gr.File(
            label="…or upload a UTF-8 text file (line endings are kept exactly)", type="filepath",
            elem_id="edit-upload", height=160,
        )
        self.instruction = gr.Textbox(
            label="Instruction", lines=2, max_lines=20, elem_id="edit-instruction",
            placeholder="e.g. Rename greet to welcome.",
            info="in words, or the edit itself in a fenced code block: an update snippet with '# ... existing "
                 "code ...' lines where code is kept, or a unified diff (applied without the model when its place "
                 "is certain)",
        )
        self.mode = gr.Radio(
            choices=[("model: the model writes the program", "model"),
                     ("reference: replay the oracle program of a desired result", "reference")],
            value="model", label="Mode", elem_id="edit-mode",
        )
        with gr.Group(visible=False) as self.target_group:
            self.target = gr.Textbox(label="Desired result (reference mode)", lines=8, max_lines=30,
                                     elem_id="edit-target", elem_classes=["mono"])
            self.target_upload = gr.File(label="…or upload the desired result (exact bytes)", type="filepath",
                                         elem_id="edit-target-upload", height=160)
        self.max_tokens = gr.Slider(
            1, limits.max_new_tokens, value=min(limits.default_new_tokens, limits.max_new_tokens), step=1,
            label="Max new tokens (the tokens the model chooses; forced tag tokens come on top)",
            elem_id="edit-max-tokens",
        )
        with gr.Row():
            self.run_button = gr.Button("Run edit", variant="primary", elem_id="edit-run")
            self.cancel_button = gr.Button("Cancel", variant="stop", elem_id="edit-cancel", interactive=False)
        self.status = gr.Textbox(label="Status", interactive=False, elem_id="edit-status", lines=2)
        gr.Markdown(limits.describe(), elem_classes=["cad-note"])

    def _build_outputs(self) -> None:
        gr.HTML(LEGEND)
        self.stream = gr.HighlightedText(
            label="Decode stream (copied / generated / tags)", color_map=COLOUR_MAP, show_legend=True,
            show_inline_category=True, combine_adjacent=False, elem_id="edit-stream", elem_classes=["mono"],
            interactive=False,
        )
        self.metrics: dict[str, gr.Textbox] = {}
        with gr.Group(elem_id="edit-metrics", elem_classes=["metrics"]):
            for row in (("elapsed", "rate", "plain", "speedup"), ("copied", "generated", "tag", "forwards")):
                with gr.Row():
                    for name in row:
                        self.metrics[name] = gr.Textbox(value="—", label=METRIC_LABELS[name], interactive=False,
                                                        elem_id=f"metric-{name}", min_width=100)
        with gr.Tabs():
            with gr.Tab("Output"):
                self.output = gr.Textbox(label="Output", lines=10, max_lines=30, interactive=False,
                                         elem_id="edit-output", elem_classes=["mono"], buttons=["copy"])
            with gr.Tab("Program"):  # a Textbox wraps long programs (a Code view was one long line)
                self.program = gr.Textbox(label="Program", lines=10, max_lines=30, interactive=False,
                                          elem_id="edit-program", elem_classes=["mono"])
            with gr.Tab("Diff against input"):
                self.diff = gr.Code(label="Unified diff", language=None, interactive=False, elem_id="edit-diff")
        self.download = gr.DownloadButton("Download output", value=None, elem_id="edit-download", size="sm")
        self.chart = gr.Plot(label="Tokens over time", elem_id="edit-chart")

    # -- wiring --------------------------------------------------------------------------------

    @property
    def run_outputs(self) -> list[Any]:
        """The /edit API's outputs, in this order: stream, program, output, diff, 8 metrics, chart,
        download, the cancel button's state, status (last)."""
        return [self.stream, self.program, self.output, self.diff, *(self.metrics[n] for n in METRIC_NAMES),
                self.chart, self.download, self.cancel_button, self.status]

    def wire(self, after_run: Any) -> None:
        ui_event(self.upload.upload, self.on_upload, [self.upload],
                 [self.source, self.uploaded, self.upload_name, self.status, self.upload])
        ui_event(self.upload.clear, self.on_clear_upload, [], [self.uploaded, self.upload_name])
        ui_event(self.target_upload.upload, self.on_target_upload, [self.target_upload],
                 [self.target, self.target_uploaded, self.status, self.target_upload])
        ui_event(self.target_upload.clear, lambda: {self.target_uploaded: None}, [], [self.target_uploaded])
        ui_event(self.mode.change, self.on_mode, [self.mode], [self.target_group], queue=False)
        run = api_event(
            self.run_button.click, self.run,
            [self.model, self.source, self.instruction, self.mode, self.target, self.max_tokens,
             self.uploaded, self.upload_name, self.target_uploaded],
            self.run_outputs, name="edit", show_progress="minimal",
            **run_concurrency(self.service.config.max_waiting),
        )
        after_run(run)
        api_event(self.cancel_button.click, self.cancel, [], [self.status], name="cancel", queue=False)

    # -- callbacks -----------------------------------------------------------------------------

    def on_upload(self, path: str | None) -> dict[Any, Any]:
        if not path:
            return {self.uploaded: None, self.upload_name: None}
        name = Path(path).name
        try:
            text = self.service.read_upload(path)
        except InputError as error:
            return {self.status: str(error), self.uploaded: None, self.upload_name: None, self.upload: None}
        from backend.core.lines import line_count

        final = "ends with a newline" if text.endswith(("\n", "\r")) else "no newline at the end"
        return {
            self.source: text, self.uploaded: text, self.upload_name: name,
            self.status: f"loaded {name}: {line_count(text):,} lines, {line_endings(text)} line endings, {final} "
                         "(kept exactly)",
        }

    def on_clear_upload(self) -> dict[Any, Any]:
        return {self.uploaded: None, self.upload_name: None}

    def on_target_upload(self, path: str | None) -> dict[Any, Any]:
        if not path:
            return {self.target_uploaded: None}
        try:
            text = self.service.read_upload(path, what="the desired result")
        except InputError as error:
            return {self.status: str(error), self.target_uploaded: None, self.target_upload: None}
        return {self.target: text, self.target_uploaded: text,
                self.status: f"desired result loaded: {line_endings(text)} line endings (kept exactly)"}

    def on_mode(self, mode: str) -> dict[Any, Any]:
        return {self.target_group: gr.update(visible=mode == "reference")}

    def cancel(self, request: gr.Request = None) -> dict[Any, Any]:  # type: ignore[assignment]
        if self.service.cancel(session_key(request)):
            return {self.status: "cancelling… the partial result will be kept"}
        return {}

    def request_from(self, model: str, source: str, instruction: str, mode: str, target: str | None,
                     max_new_tokens: Any, uploaded: str | None, target_uploaded: str | None) -> tuple[RunRequest, str | None]:
        """The run's request from widget values: exact uploaded bytes where the box still shows them,
        a typed target in the input's line endings (said in the returned note)."""
        source = exact_source(source, uploaded)
        note = None
        if mode == "reference" and target:
            target = exact_source(target, target_uploaded)
            if target != target_uploaded:
                target, note = adopt_line_endings(source, target)
        return RunRequest(
            model=model or self.service.default_model, source=source, instruction=instruction or "", strategy="cad",
            mode=mode or "model", target=target or None, max_new_tokens=max_new_tokens,
        ), note

    def run(
        self, model: str, source: str, instruction: str, mode: str, target: str | None, max_new_tokens: Any,
        uploaded: str | None = None, upload_name: str | None = None, target_uploaded: str | None = None,
        request: gr.Request = None,  # type: ignore[assignment]
    ) -> Iterator[dict[Any, Any]]:
        service = self.service
        raw, note = self.request_from(model, source, instruction, mode, target, max_new_tokens, uploaded, target_uploaded)
        try:
            run = service.prepare(raw)
        except InputError as error:
            yield {self.status: str(error)}
            return
        yield from run_in_turn(service, session_key(request), status=self.status, cancel_button=self.cancel_button,
                               body=lambda cancel: self._stream(run, cancel, upload_name, note))

    def _stream(self, run: PreparedRun, cancel: Any, upload_name: str | None, note: str | None) -> Iterator[dict[Any, Any]]:
        service, request = self.service, run.request
        try:
            session = service.new_session(run, kind="edit")
        except StorageError as error:
            yield {self.status: str(error), self.cancel_button: gr.update(interactive=False)}
            return
        yield {
            self.stream: [], self.program: "", self.output: "", self.diff: "", self.chart: None, self.download: None,
            **self._metric_values({}), self.cancel_button: gr.update(interactive=True),
            self.status: f"running copy-as-decode ({request.mode} mode)…" + (f" · note: {note}" if note else ""),
        }
        last_chart = 0.0
        step = service.step_seconds(run.model)
        for snap in service.stream_run(run, session_id=session.id, cancel=cancel):
            failed = snap.done and is_failure(snap, request.mode)
            unchanged = snap.done and is_unchanged(snap, request.mode, request.source)
            update: dict[Any, Any] = {
                self.stream: spans_value(snap.spans), self.program: snap.program, self.output: snap.output,
                **self._metric_values(snap.metrics, failed=failed, unchanged=unchanged),
            }
            if snap.done or time.monotonic() - last_chart >= CHART_EVERY_S:
                last_chart = time.monotonic()
                # the same step price as the metrics: this run's own steps once it has them
                update[self.chart] = charts.tokens_over_time(snap.timeline, step_seconds=snap.metrics.get("step_seconds", step))
            if snap.done:
                update[self.diff] = unified_diff(request.source, snap.output)
                update[self.download] = service.downloads.write(snap.output, upload_name or "output.txt")
                update[self.status] = finish_text(
                    snap, mode=request.mode, max_new_tokens=request.max_new_tokens,
                    run_seconds=service.config.run_seconds, source=request.source,
                ) + (f" · note: {note}" if note else "")
                update[self.cancel_button] = gr.update(interactive=False)
            elif snap.spans or snap.metrics.get("forwards"):
                update[self.status] = f"decoding… {snap.wall_seconds:.1f} s"
            else:
                update[self.status] = f"reading the prompt… {snap.wall_seconds:.1f} s"
            yield update

    def _metric_values(self, metrics: dict[str, Any], *, failed: bool = False, unchanged: bool = False) -> dict[Any, str]:
        texts = format_metrics(metrics, failed=failed, unchanged=unchanged)
        return {self.metrics[name]: texts[name] for name in METRIC_NAMES}

    # -- reopening a stored edit (History) -----------------------------------------------------

    def show_stored(self, edit: EditRecord, stream: list[tuple[str, str | None]]) -> dict[Any, Any]:
        step = edit.metrics.get("step_seconds")
        timeline = edit.events.get("timeline") or []
        failed = edit.partial and edit.stop_reason in ("loop", "error", "time_limit", "interrupted", "max_tokens")
        unchanged = not failed and changed_nothing(edit.mode, edit.output, edit.input)
        return {
            self.source: edit.input, self.uploaded: edit.input, self.instruction: edit.instruction,
            self.mode: edit.mode, self.target: edit.target or "", self.target_uploaded: edit.target,
            self.target_group: gr.update(visible=edit.mode == "reference"),
            self.stream: stream, self.program: edit.program or "", self.output: edit.output,
            self.diff: unified_diff(edit.input, edit.output),
            **self._metric_values(edit.metrics, failed=failed, unchanged=unchanged),
            self.chart: charts.tokens_over_time(timeline, step_seconds=step, strategy=edit.strategy),
            self.download: self.service.downloads.write(edit.output, "output.txt"),
            self.status: f"reopened edit #{edit.id} ({edit.stop_reason})" + (" (partial)" if edit.partial else "")
                         + (" · NO CHANGE: the output equals the input" if unchanged else ""),
        }

    @property
    def stored_outputs(self) -> list[Any]:
        return [self.source, self.uploaded, self.instruction, self.mode, self.target, self.target_uploaded,
                self.target_group, *self.run_outputs]
