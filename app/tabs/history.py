"""The History tab: every stored session, a page at a time, searchable; reopen, delete (with a
confirmation that counts the labels at stake and keeps them by default), export."""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.service import AppService
from app.tabs.common import ui_event
from backend.storage import EditRecord, SessionRecord

PAGE_SIZE = 50
HISTORY_HEADERS = ["session", "time (UTC)", "kind", "title", "model", "mode", "input chars", "input lines",
                   "output chars", "edits", "speed-up"]


def stream_spans(edit: EditRecord) -> list[tuple[str, str | None]]:
    spans = edit.events.get("spans") if isinstance(edit.events, dict) else None
    if spans:
        return [(text, kind) for kind, text in spans if text]
    return [(edit.output, None)] if edit.output else []


def _row(s: SessionRecord) -> list[Any]:
    return [s.id, s.created_at.strftime("%Y-%m-%d %H:%M:%S"), s.kind, s.title, s.model, s.mode, s.input_chars,
            s.input_lines, s.output_chars, s.edit_count, "—" if s.speedup is None else f"{s.speedup:.2f}×"]


class HistoryTab:
    def __init__(self, service: AppService) -> None:
        self.service = service

    def build(self) -> None:
        with gr.Tab("History", id="history", elem_id="history-panel"):
            self.view = gr.State({"page": 0, "search": ""})
            with gr.Row():
                self.search = gr.Textbox(label="Search titles (or #id)", elem_id="hist-search", scale=2)
                self.refresh_button = gr.Button("Refresh", elem_id="hist-refresh")
                self.prev_button = gr.Button("◀ newer", elem_id="hist-prev", size="sm")
                self.next_button = gr.Button("older ▶", elem_id="hist-next", size="sm")
            with gr.Row():
                self.session = gr.Dropdown(choices=[], label="Session", elem_id="hist-session", scale=3)
                self.reopen_button = gr.Button("Reopen", variant="primary", elem_id="hist-reopen")
                self.delete_button = gr.Button("Delete…", variant="stop", elem_id="hist-delete")
                self.export_one = gr.Button("Export session", elem_id="hist-export")
                self.export_all = gr.Button("Export all", elem_id="hist-export-all")
            with gr.Group(visible=False, elem_id="hist-confirm") as self.confirm_group:
                self.confirm_text = gr.Markdown("")
                self.delete_labels = gr.Checkbox(value=False, label="also delete its human labels", elem_id="hist-delete-labels")
                with gr.Row():
                    self.confirm_button = gr.Button("Confirm delete", variant="stop", elem_id="hist-confirm-delete")
                    self.keep_button = gr.Button("Keep it", elem_id="hist-keep")
            self.status = gr.Textbox(label="Status", interactive=False, elem_id="hist-status")
            self.table = gr.Dataframe(headers=HISTORY_HEADERS, value=[], datatype="str", type="array",
                                      interactive=False, elem_id="hist-table", label="Sessions (newest first)")
            self.export_file = gr.DownloadButton("Download export", value=None, elem_id="hist-export-file")

    @property
    def listing_outputs(self) -> list[Any]:
        return [self.view, self.table, self.session, self.status, self.confirm_group]

    def wire(self, demo: gr.Blocks, edit: Any, compare: Any, tabs: gr.Tabs) -> None:
        self.edit, self.compare, self.tabs = edit, compare, tabs
        listing = self.listing_outputs
        ui_event(demo.load, self.listing, [], listing)
        ui_event(self.refresh_button.click, self.refresh, [self.view], listing)
        ui_event(self.search.submit, self.find, [self.search], listing)
        ui_event(self.prev_button.click, lambda view: self.listing(view, -1), [self.view], listing)
        ui_event(self.next_button.click, lambda view: self.listing(view, +1), [self.view], listing)
        ui_event(self.table.select, self.pick_row, [], [self.session])
        ui_event(self.reopen_button.click, self.reopen, [self.session],
                 [*edit.stored_outputs, *compare.stored_outputs, tabs, self.status])
        ui_event(self.delete_button.click, self.ask_delete, [self.session],
                 [self.confirm_group, self.confirm_text, self.delete_labels, self.status])
        ui_event(self.confirm_button.click, self.delete, [self.session, self.delete_labels, self.view], listing)
        ui_event(self.keep_button.click, lambda: {self.confirm_group: gr.update(visible=False),
                                                  self.status: "nothing deleted"}, [], [self.confirm_group, self.status])
        ui_event(self.export_one.click, lambda sid: self.export(sid, everything=False), [self.session],
                 [self.export_file, self.status])
        ui_event(self.export_all.click, lambda: self.export(None, everything=True), [], [self.export_file, self.status])

    # -- listing -------------------------------------------------------------------------------

    def listing(self, view: dict[str, Any] | None = None, step: int = 0) -> dict[Any, Any]:
        view = dict(view or {"page": 0, "search": ""})
        storage, search = self.service.storage, view.get("search", "")
        total = storage.count_sessions(search=search)
        pages = max(1, -(-total // PAGE_SIZE))
        page = min(max(0, int(view.get("page", 0)) + step), pages - 1)
        sessions = storage.list_sessions(limit=PAGE_SIZE, offset=page * PAGE_SIZE, search=search)
        choices = [(f"#{s.id} · {s.created_at:%m-%d %H:%M} · {s.kind} · {s.title[:40] or '(no title)'}", s.id)
                   for s in sessions]
        found = f" matching {search!r}" if search else ""
        return {
            self.view: {"page": page, "search": search}, self.table: [_row(s) for s in sessions],
            self.session: gr.update(choices=choices, value=choices[0][1] if choices else None),
            self.status: f"{total} sessions in the database{found} · page {page + 1} of {pages} ({PAGE_SIZE} a page)",
            self.confirm_group: gr.update(visible=False),
        }

    def refresh(self, view: dict[str, Any] | None = None) -> dict[Any, Any]:
        return self.listing(view)

    def find(self, search: str) -> dict[Any, Any]:
        return self.listing({"page": 0, "search": (search or "").strip()[:200]})

    def pick_row(self, event: gr.SelectData) -> Any:
        row = getattr(event, "row_value", None)
        return gr.update(value=int(row[0])) if row else gr.skip()

    # -- one session ---------------------------------------------------------------------------

    def reopen(self, session_id: int | None) -> dict[Any, Any]:
        if session_id is None:
            return {self.status: "choose a session first"}
        storage = self.service.storage
        session, edits = storage.get_session(int(session_id)), storage.session_edits(int(session_id))
        if session is None or not edits:
            return {self.status: f"session #{session_id} has no stored edits (deleted?)"}
        if session.kind == "compare":
            return {**self.compare.show_stored(session.id, edits, stream_spans), self.tabs: gr.Tabs(selected="compare"),
                    self.status: f"reopened comparison #{session.id}"}
        edit = edits[-1]
        return {**self.edit.show_stored(edit, stream_spans(edit)), self.tabs: gr.Tabs(selected="edit"),
                self.status: f"reopened session #{session.id} in the Edit tab"}

    def ask_delete(self, session_id: int | None) -> dict[Any, Any]:
        if session_id is None:
            return {self.status: "choose a session first"}
        preview = self.service.storage.delete_preview(int(session_id))
        if preview is None:
            return {self.status: f"session #{session_id} was already gone"}
        labels = (f"{preview.annotations} human label(s) by {preview.annotators} annotator(s) on "
                  f"{preview.labelled_edits} of its edits: they are KEPT (with those edits) unless you tick the box"
                  if preview.annotations else "no human labels")
        return {self.confirm_group: gr.update(visible=True), self.delete_labels: False,
                self.confirm_text: f"Delete session #{preview.session_id}: {preview.edits} edit(s); {labels}.",
                self.status: f"confirm: delete session #{preview.session_id}?"}

    def delete(self, session_id: int | None, delete_labels: bool, view: dict[str, Any] | None = None) -> dict[Any, Any]:
        if session_id is None:
            return {self.status: "choose a session first"}
        storage = self.service.storage
        preview = storage.delete_preview(int(session_id))
        deleted = storage.delete_session(int(session_id), keep_labelled=not delete_labels)
        listing = self.listing(view)
        if not deleted or preview is None:
            return {**listing, self.status: f"session #{session_id} was already gone"}
        kept = "" if delete_labels or not preview.labelled_edits else (
            f"; kept {preview.labelled_edits} labelled edit(s) and their {preview.annotations} label(s)")
        gone = f" and {preview.annotations} label(s)" if delete_labels and preview.annotations else ""
        return {**listing, self.status: f"deleted session #{session_id}{gone}{kept}"}

    def export(self, session_id: int | None, *, everything: bool) -> dict[Any, Any]:
        storage = self.service.storage
        if everything:
            text, name = storage.export_sessions_jsonl(), "sessions.jsonl"
        elif session_id is None:
            return {self.status: "choose a session first"}
        else:
            text, name = storage.export_sessions_jsonl([int(session_id)]), f"session-{int(session_id)}.jsonl"
        return {self.export_file: self.service.downloads.write(text, name),
                self.status: f"exported {text.count(chr(10))} session(s) as JSONL"}
