"""The Gradio Blocks: a top bar (model picker and status) and four tabs, each built by its own
module in app/tabs/ with its callbacks next to its widgets. This module only assembles them.

User text is only ever shown through Textbox / Code / HighlightedText / Dataframe("str") values,
which the front end renders as text; Markdown and HTML hold fixed strings of the app.

API: only deliberate endpoints are callable by name (/edit, /compare, /cancel, /model_status,
/annotation_queue, /annotate); everything else is page plumbing (api_visibility "private").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from app.service import AppService
from app.tabs.annotate import AnnotateTab
from app.tabs.common import ui_event
from app.tabs.compare import CompareTab
from app.tabs.edit import EditTab
from app.tabs.history import HistoryTab

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
DOWNLOAD_CACHE = (3600, 3600)  # Gradio's own copies of downloads: swept hourly, older than an hour removed
INTRO = (
    "### copy-as-decode\n"
    "The model writes a small **program**: `<copy lines=\"i-j\"/>` copies input lines through one "
    "parallel forward; `<gen>…</gen>` writes new text token by token."
)


def static_css() -> str:
    return (STATIC_DIR / "app.css").read_text(encoding="utf-8")


def static_head() -> str:
    script = (STATIC_DIR / "shortcuts.js").read_text(encoding="utf-8")
    return f"<script>\n{script}\n</script>"


def theme() -> gr.themes.Base:
    return gr.themes.Default(primary_hue="blue", secondary_hue="orange")


@dataclass
class AppUI:
    demo: gr.Blocks
    model: gr.Dropdown
    model_status: gr.Textbox
    timer: gr.Timer
    edit: EditTab
    compare: CompareTab
    annotate: AnnotateTab
    history: HistoryTab


class _TopBar:
    def __init__(self, service: AppService) -> None:
        self.service = service
        gr.Markdown(INTRO, elem_id="intro")
        with gr.Row(elem_id="topbar"):  # the picker gets half the width: model labels are long
            self.model = gr.Dropdown(choices=service.model_choices(), value=service.default_model, label="Model",
                                     elem_id="model-picker", scale=1, min_width=420)
            self.status = gr.Textbox(value=service.model_status().text, label="Model status", interactive=False,
                                     elem_id="model-status", scale=1)
        self.timer = gr.Timer(1.0)

    def select(self, name: str) -> dict[Any, Any]:
        status = self.service.load_model(name)
        return {self.status: status.text, self.timer: gr.Timer(active=not status.ready)}

    def poll(self, name: str | None) -> dict[Any, Any]:
        """The model's status; the page stops polling once it is ready or failed."""
        status = self.service.model_status(name or self.service.default_model)
        return {self.status: status.text, self.timer: gr.Timer(active=status.state in ("loading", "measuring"))}

    def wire(self, demo: gr.Blocks) -> None:
        ui_event(demo.load, self.poll, [self.model], [self.status, self.timer])
        ui_event(self.model.change, self.select, [self.model], [self.status, self.timer])
        ui_event(self.timer.tick, self.poll, [self.model], [self.status, self.timer], show_progress="hidden")

        def model_status(name: str) -> str:
            """The model's status text: "loading model…", "ready: …" or "error loading …"."""
            return self.service.model_status(name or self.service.default_model).text

        gr.api(model_status, api_name="model_status")


def build_app(service: AppService) -> AppUI:
    with gr.Blocks(title="copy-as-decode", analytics_enabled=False, delete_cache=DOWNLOAD_CACHE) as demo:
        top = _TopBar(service)
        edit, compare = EditTab(service, top.model), CompareTab(service, top.model)
        annotate, history = AnnotateTab(service), HistoryTab(service)
        with gr.Tabs(selected="edit", elem_id="tabs") as tabs:
            edit.build()
            compare.build()
            annotate.build()
            history.build()
        top.wire(demo)

        def refresh_history(run: Any) -> None:
            ui_event(run.then, history.refresh, [history.view], history.listing_outputs)

        edit.wire(refresh_history)
        compare.wire(edit, refresh_history)
        annotate.wire(demo)
        history.wire(demo, edit, compare, tabs)
    return AppUI(demo, top.model, top.status, top.timer, edit, compare, annotate, history)


def build_ui(service: AppService) -> gr.Blocks:
    return build_app(service).demo


def launch(demo: gr.Blocks, *, host: str, port: int, max_waiting: int = 8, **kwargs: Any) -> Any:
    # Gradio's own line is a second bound behind the app's run queue (app/run_queue.py).
    return demo.queue(default_concurrency_limit=4, max_size=4 * (max_waiting + 4)).launch(
        server_name=host, server_port=port, ssr_mode=False, theme=theme(), css=static_css(), head=static_head(),
        show_error=True, footer_links=[], max_file_size="10mb", **kwargs,
    )
