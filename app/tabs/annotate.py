"""The Annotate tab: a queue of stored edits to label, blind A/B preference, exports, kappa.

Blind A/B: when an edit has a sibling from the same comparison, both outputs are shown as plain
text on sides drawn at random per item, the strategy names stay hidden until the label is saved,
and the side each edit was shown on is stored with the annotation. The queue is shuffled per
load, so the order of a comparison's runs (plain, prompt lookup, copy-as-decode) reveals nothing.
"""

from __future__ import annotations

import random
from typing import Any

import gradio as gr

from app.present import STRATEGY_LABELS, unified_diff
from app.progress import merge_spans
from app.service import AppService, InputError
from app.tabs.common import COLOUR_MAP, api_event, ui_event
from backend.storage import EditRecord, StorageError

LABEL_CHOICES = [("1 · correct", "correct"), ("2 · partly correct", "partly_correct"), ("3 · wrong", "wrong")]
ERROR_CHOICES = [("none", "none"), ("span selection (wrong lines copied)", "span_selection"),
                 ("generated content", "generated_content"), ("format", "format")]
PREFERENCE_CHOICES = [("no preference given", "none"), ("left is better (a)", "left"),
                      ("right is better (b)", "right"), ("same (=)", "same")]
CORPORA = ["humanevalpack-python", "humanevalpack-js", "commits", "stdlib-probe"]
SHORTCUTS = ("Keys (outside text fields): **1** correct · **2** partly correct · **3** wrong · "
             "**e** cycle error kind · **a** / **b** / **=** left / right / same · **s** skip · **Enter** save · "
             "**Esc** leaves a text field.")


def stored_spans(edit: EditRecord) -> list[tuple[str, str | None]]:
    """The output highlighted copy/gen when the stored stream allows it, else plain."""
    spans = edit.events.get("spans") if isinstance(edit.events, dict) else None
    if spans:
        body = [(text, kind) for kind, text in spans if kind in ("copy", "gen", "draft")]
        if "".join(t for t, _ in body) == edit.output:
            return list(merge_spans(body))
    return [(edit.output, None)] if edit.output else []


def to_preference(choice: str | None, edit_id: int, left_id: int | None) -> str | None:
    """A side the annotator picked -> the stored preference ("A" = the labelled edit, "B" = the other)."""
    if choice in (None, "", "none") or left_id is None:
        return None
    if choice == "same":
        return "same"
    picked_left = choice == "left"
    return "A" if picked_left == (left_id == edit_id) else "B"


class AnnotateTab:
    def __init__(self, service: AppService, rng: random.Random | None = None) -> None:
        self.service = service
        self.rng = rng or random.Random()

    def build(self) -> None:
        with gr.Tab("Annotate", id="annotate", elem_id="annotate-panel"):
            self.queue = gr.State({"ids": [], "pos": 0, "saved": 0})
            with gr.Row():
                self.name = gr.Textbox(label="Annotator name", elem_id="ann-name", scale=2, placeholder="your name, then Enter")
                self.load_button = gr.Button("Load my queue", variant="primary", elem_id="ann-load", scale=1)
                self.progress = gr.Textbox(label="Progress", interactive=False, elem_id="ann-progress", scale=2)
            with gr.Accordion("Add edits from a corpus", open=False, elem_id="ann-corpus"):
                with gr.Row():
                    self.corpus = gr.Dropdown(choices=CORPORA, value=CORPORA[0], label="Corpus", elem_id="ann-corpus-name")
                    self.count = gr.Number(value=10, precision=0, minimum=1, maximum=500, label="Cases",
                                           elem_id="ann-corpus-count")
                    self.import_button = gr.Button("Import (target = the corpus's answer)", elem_id="ann-import")
            self.info = gr.Textbox(label="Edit", interactive=False, elem_id="ann-info")
            self.instruction = gr.Textbox(label="Instruction", interactive=False, elem_id="ann-instruction")
            with gr.Row():
                self.input = gr.Textbox(label="Input", lines=10, max_lines=24, interactive=False, elem_id="ann-input",
                                        elem_classes=["mono"])
                self.output = gr.HighlightedText(label="Output to label", color_map=COLOUR_MAP, show_legend=True,
                                                 elem_id="ann-output", elem_classes=["mono"], interactive=False)
            self.diff = gr.Code(label="Diff: input → output", language=None, interactive=False, elem_id="ann-diff")
            with gr.Row(visible=False) as self.ab_row:
                self.left = gr.Textbox(label="Left", lines=8, max_lines=24, interactive=False, elem_id="ann-ab-left",
                                       elem_classes=["mono"])
                self.right = gr.Textbox(label="Right", lines=8, max_lines=24, interactive=False, elem_id="ann-ab-right",
                                        elem_classes=["mono"])
            self._build_judgement()

    def _build_judgement(self) -> None:
        with gr.Row():
            self.label = gr.Radio(choices=LABEL_CHOICES, value=None, label="Label", elem_id="ann-label")
            self.error = gr.Radio(choices=ERROR_CHOICES, value="none", label="Error kind", elem_id="ann-error")
            self.preference = gr.Radio(choices=PREFERENCE_CHOICES, value="none", label="A/B preference (blind)",
                                       elem_id="ann-pref", visible=False)
        self.note = gr.Textbox(label="Note (optional)", lines=2, elem_id="ann-note")
        with gr.Row():
            self.save_button = gr.Button("Save (Enter)", variant="primary", elem_id="ann-save")
            self.skip_button = gr.Button("Skip (s)", elem_id="ann-skip")
        gr.Markdown(SHORTCUTS, elem_classes=["cad-note"])
        self.status = gr.Textbox(label="Status", interactive=False, elem_id="ann-status")
        with gr.Row():
            self.export_jsonl = gr.Button("Export annotations (JSONL)", elem_id="ann-export-jsonl")
            self.export_csv = gr.Button("Export annotations (CSV)", elem_id="ann-export-csv")
            self.export_file = gr.DownloadButton("Download export", value=None, elem_id="ann-export")
        with gr.Row():
            self.kappa_a = gr.Dropdown(choices=[], label="Annotator A", elem_id="kappa-a", allow_custom_value=False)
            self.kappa_b = gr.Dropdown(choices=[], label="Annotator B", elem_id="kappa-b", allow_custom_value=False)
            self.kappa_button = gr.Button("Agreement (Cohen's kappa)", elem_id="kappa-run")
        self.kappa_result = gr.Textbox(label="Agreement", interactive=False, elem_id="kappa-result")

    @property
    def item_outputs(self) -> list[Any]:
        return [self.queue, self.progress, self.info, self.instruction, self.input, self.output, self.diff,
                self.ab_row, self.left, self.right, self.label, self.error, self.preference, self.note, self.status]

    def wire(self, demo: gr.Blocks) -> None:
        items = self.item_outputs
        api_event(self.load_button.click, self.load_queue, [self.name], items, name="annotation_queue")
        ui_event(self.name.submit, self.load_queue, [self.name], items)
        saved = api_event(self.save_button.click, self.save,
                          [self.name, self.queue, self.label, self.error, self.preference, self.note], items,
                          name="annotate")
        ui_event(saved.then, self.annotator_choices, [], [self.kappa_a, self.kappa_b])
        ui_event(self.skip_button.click, self.skip, [self.queue], items)
        ui_event(self.import_button.click, self.import_corpus, [self.name, self.corpus, self.count], items)
        ui_event(self.export_jsonl.click, lambda: self.export("jsonl"), [], [self.export_file, self.status])
        ui_event(self.export_csv.click, lambda: self.export("csv"), [], [self.export_file, self.status])
        ui_event(self.kappa_button.click, self.kappa, [self.kappa_a, self.kappa_b], [self.kappa_result])
        ui_event(demo.load, self.annotator_choices, [], [self.kappa_a, self.kappa_b])

    # -- the queue -----------------------------------------------------------------------------

    def load_queue(self, annotator: str) -> dict[Any, Any]:
        name = (annotator or "").strip()
        if not name:
            return {self.status: "enter your annotator name first", self.queue: {"ids": [], "pos": 0, "saved": 0}}
        ids = [e.id for e in self.service.storage.annotation_queue(name)]
        self.rng.shuffle(ids)  # blind: a comparison's runs do not come in strategy order
        queue = {"ids": ids, "pos": 0, "saved": 0, "annotator": name}
        status = f"{len(ids)} edits to label for {name}" if ids else f"nothing left to label for {name}: run edits or import a corpus"
        return {**self.show(queue), self.status: status}

    def show(self, queue: dict[str, Any]) -> dict[Any, Any]:
        """The current item of the queue (or an empty view), plus progress."""
        ids, pos, storage = queue.get("ids", []), queue.get("pos", 0), self.service.storage
        edit = None
        while pos < len(ids):
            edit = storage.get_edit(ids[pos])
            if edit is not None:
                break
            pos += 1  # deleted meanwhile
        total, saved = len(ids), queue.get("saved", 0)
        progress = (f"item {min(pos + 1, total)} of {total} · {saved} saved this round" if total and pos < total
                    else f"queue done · {saved} saved this round" if total else "queue empty")
        reset = {self.label: None, self.error: "none", self.note: "", self.progress: progress}
        if edit is None:
            return {self.queue: {**queue, "pos": pos, "left": None}, self.info: "", self.instruction: "",
                    self.input: "", self.output: [], self.diff: "", self.ab_row: gr.update(visible=False),
                    self.preference: gr.update(value="none", visible=False), **reset}
        other = self.other_edit(edit)
        left_id = None
        view: dict[Any, Any] = {self.ab_row: gr.update(visible=other is not None),
                                self.preference: gr.update(value="none", visible=other is not None)}
        if other is not None:
            left, right = (edit, other) if self.rng.random() < 0.5 else (other, edit)
            left_id = left.id
            view.update({self.left: left.output, self.right: right.output})
        blind = other is not None
        info = f"edit #{edit.id} · {edit.mode} mode" + (f" · case {edit.case_id}" if edit.case_id else "")
        info += " · strategy hidden until you save (blind A/B)" if blind else (
            f" · {STRATEGY_LABELS.get(edit.strategy, edit.strategy)} · {edit.model}")
        info += " · PARTIAL" if edit.partial else ""
        return {
            **view, **reset, self.queue: {**queue, "pos": pos, "left": left_id}, self.info: info,
            self.instruction: edit.instruction, self.input: edit.input,
            self.output: [(edit.output, None)] if blind else stored_spans(edit),  # colours would reveal copy-as-decode
            self.diff: unified_diff(edit.input, edit.output),
        }

    def other_edit(self, edit: EditRecord) -> EditRecord | None:
        """For A/B: another strategy's edit of the same comparison (cad vs plain, else vs cad)."""
        siblings = [e for e in self.service.storage.session_edits(edit.session_id) if e.id != edit.id]
        preferred = "ar" if edit.strategy == "cad" else "cad"
        for sibling in siblings:
            if sibling.strategy == preferred:
                return sibling
        return siblings[0] if siblings and siblings[0].strategy != edit.strategy else None

    def save(self, annotator: str, queue: dict[str, Any], label: str | None, error_kind: str | None,
             preference: str | None, note: str) -> dict[Any, Any]:
        ids, pos = queue.get("ids", []), queue.get("pos", 0)
        if pos >= len(ids):
            return {self.status: "nothing to save: the queue is done (load it again)"}
        if not label:
            return {self.status: "choose a label first: 1 correct, 2 partly correct, 3 wrong"}
        storage = self.service.storage
        edit = storage.get_edit(ids[pos])
        if edit is None:
            return {**self.show({**queue, "pos": pos + 1}), self.status: f"edit #{ids[pos]} was deleted; skipped"}
        other = self.other_edit(edit)
        left_id = queue.get("left") if other is not None else None
        pref = to_preference(preference, edit.id, left_id)
        try:
            saved = storage.save_annotation(
                edit_id=edit.id, annotator=annotator or queue.get("annotator", ""), label=label,
                error_kind=None if error_kind in (None, "", "none") else error_kind, preference=pref,
                other_edit_id=other.id if pref and other else None, note=note or "",
                shown_first_edit_id=left_id if pref else None,
            )
        except StorageError as error:
            return {self.status: str(error)}
        status = f"saved: edit #{saved.edit_id} = {saved.label} by {saved.annotator}"
        if other is not None:
            sides = {edit.id: edit, other.id: other}
            right_id = other.id if left_id == edit.id else edit.id
            status += (f" · left was {STRATEGY_LABELS.get(sides[left_id].strategy)} (#{left_id}), right was "
                       f"{STRATEGY_LABELS.get(sides[right_id].strategy)} (#{right_id})") if left_id in sides else ""
        queue = {**queue, "pos": pos + 1, "saved": queue.get("saved", 0) + 1}
        return {**self.show(queue), self.status: status}

    def skip(self, queue: dict[str, Any]) -> dict[Any, Any]:
        ids, pos = queue.get("ids", []), queue.get("pos", 0)
        if pos >= len(ids):
            return {self.status: "the queue is done"}
        return {**self.show({**queue, "pos": pos + 1}), self.status: f"skipped edit #{ids[pos]}"}

    def import_corpus(self, annotator: str, corpus: str, count: Any) -> dict[Any, Any]:
        try:
            number = int(count) if isinstance(count, (int, float)) and float(count).is_integer() else 0
            session, edits, skipped = self.service.import_corpus(corpus, number)
        except (InputError, StorageError) as error:
            return {self.status: str(error)}
        loaded = self.load_queue(annotator) if (annotator or "").strip() else {}
        if session is None:
            return {**loaded, self.status: f"all {skipped} cases of {corpus} were already imported; nothing added"}
        again = f" ({skipped} already imported, skipped)" if skipped else ""
        return {**loaded, self.status: f"imported {len(edits)} cases of {corpus} as session #{session.id}{again}"}

    # -- exports and agreement -----------------------------------------------------------------

    def export(self, kind: str) -> dict[Any, Any]:
        storage = self.service.storage
        text = storage.export_annotations_csv() if kind == "csv" else storage.export_annotations_jsonl()
        count = len(storage.annotations())
        return {self.export_file: self.service.downloads.write(text, f"annotations.{kind}"),
                self.status: f"exported {count} annotations as {kind.upper()}"}

    def annotator_choices(self) -> dict[Any, Any]:
        names = [a.name for a in self.service.storage.annotators()]
        return {self.kappa_a: gr.update(choices=names, value=names[0] if names else None),
                self.kappa_b: gr.update(choices=names, value=names[1] if len(names) > 1 else None)}

    def kappa(self, annotator_a: str | None, annotator_b: str | None) -> dict[Any, Any]:
        if not annotator_a or not annotator_b:
            return {self.kappa_result: "choose two annotators"}
        if annotator_a == annotator_b:
            return {self.kappa_result: "choose two different annotators"}
        result = self.service.storage.agreement(annotator_a, annotator_b)
        return {self.kappa_result: f"{annotator_a} vs {annotator_b}: {result.describe()}"}
