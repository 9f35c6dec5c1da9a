"""UI callbacks: widget values in, service calls, widget values out.

Every handler returns (or yields) a dict keyed by output names (see app/ui.py, which maps names to
components and leaves the missing ones unchanged). Nothing here builds HTML: user text goes back
as plain strings and (text, kind) pairs, which the components render as text.
"""

from __future__ import annotations

import difflib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app import charts
from app.progress import Snapshot, merge_spans
from app.service import AppService, InputError, RunRequest
from backend.storage import EditRecord, StorageError

METRIC_NAMES = ("elapsed", "copied", "generated", "tag", "forwards", "rate", "plain", "speedup")
EDIT_OUTPUTS = ("stream", "program", "output", "diff", *(f"m_{n}" for n in METRIC_NAMES), "chart", "download", "status")
COMPARE_OUTPUTS = (
    *(f"{s}_{part}" for s in ("ar", "pld", "cad") for part in ("stream", "timer")), "c_table", "c_chart", "c_status",
)
COMPARE_HEADERS = [
    "strategy", "wall s", "forwards", "tokens/s", "output tokens", "copied", "generated", "tag",
    "speed-up vs plain (measured)", "stop", "produced target", "edit",
]
HISTORY_HEADERS = ["session", "time (UTC)", "kind", "model", "mode", "input chars", "input lines", "output chars", "edits", "speed-up"]
LABEL_CHOICES = [("1 · correct", "correct"), ("2 · partly correct", "partly_correct"), ("3 · wrong", "wrong")]
ERROR_CHOICES = [("none", "none"), ("span selection (wrong lines copied)", "span_selection"),
                 ("generated content", "generated_content"), ("format", "format")]
PREFERENCE_CHOICES = [("no preference given", "none"), ("A is better", "A"), ("B is better", "B"), ("same", "same")]
STRATEGY_LABELS = {"ar": "plain decoding", "pld": "prompt lookup", "cad": "copy-as-decode"}
CHART_EVERY_S = 2.0  # redraw the plotly chart at most this often while streaming (redraws cost browser CPU)


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def exact_source(textbox: str | None, uploaded: str | None) -> str:
    """The uploaded file's exact text when the textbox still shows it (a browser textarea turns CRLF
    into LF), else the textbox as typed."""
    textbox = textbox or ""
    if uploaded and normalise_newlines(uploaded) == normalise_newlines(textbox):
        return uploaded
    return textbox


def unified_diff(before: str, after: str) -> str:
    """difflib unified diff over lines as an editor counts them, with 'No newline at end of file'."""
    from backend.core.lines import split_lines

    out = []
    for line in difflib.unified_diff(split_lines(before), split_lines(after), "input", "output", lineterm=""):
        if line.startswith(("---", "+++", "@@")):
            out.append(line + "\n")
        elif line.endswith(("\n", "\r")):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out) or "(no changes)"


def format_metrics(metrics: dict[str, Any]) -> dict[str, str]:
    def seconds(value: Any) -> str:
        return "—" if value is None else f"{float(value):.2f} s"

    speedup = metrics.get("speedup")
    return {
        "m_elapsed": seconds(metrics.get("elapsed_seconds")),
        "m_copied": str(metrics.get("tokens_copied", 0)),
        "m_generated": str(metrics.get("tokens_generated", 0)),
        "m_tag": str(metrics.get("tokens_tag", 0)),
        "m_forwards": str(metrics.get("forwards", 0)),
        "m_rate": f"{float(metrics.get('tokens_per_second') or 0.0):.1f}",
        "m_plain": seconds(metrics.get("estimated_plain_seconds")),
        "m_speedup": "—" if speedup is None else f"{float(speedup):.2f}×",
    }


def spans_value(spans: Any) -> list[tuple[str, str | None]]:
    return [(text, kind) for text, kind in spans if text]


def finish_text(snapshot: Snapshot, *, max_new_tokens: int | None = None) -> str:
    extra = snapshot.extra
    edit: EditRecord | None = extra.get("edit")
    result = snapshot.result
    elapsed = float(snapshot.metrics.get("elapsed_seconds") or 0.0)
    prefill = snapshot.metrics.get("prefill_seconds")
    timing = f"{elapsed:.2f} s decoding" + (f" + {float(prefill):.2f} s prompt prefill" if prefill is not None else "")
    if result is None:
        head = f"failed after {snapshot.wall_seconds:.2f} s: {snapshot.error}"
    elif result.stop_reason == "cancel":
        # wall time: a cancel during the prompt prefill stops before any decoding
        head = f"cancelled after {snapshot.wall_seconds:.2f} s — partial result kept"
    elif result.stop_reason == "max_tokens":
        limit = f" ({max_new_tokens})" if max_new_tokens else ""
        head = f"stopped at the max new tokens limit{limit} after {timing} — partial result"
    elif result.stop_reason == "error":
        head = f"stopped on an error after {timing} — partial result: {result.error}"
    else:
        head = f"done in {timing} ({result.stop_reason})"
        if result.error:
            head += f"; note: {result.error}"
    if edit is not None:
        saved = f"saved as edit #{edit.id}" + (" (marked partial)" if edit.partial else "")
    else:
        saved = f"NOT saved: {extra.get('save_error', 'unknown error')}"
    first = snapshot.first_span_seconds
    first_text = f" · first span after {first:.2f} s" if first is not None else ""
    return f"{head} · {saved}{first_text}"


def _write_download(text: str, name: str) -> str:
    folder = Path(tempfile.mkdtemp(prefix="copy-as-decode-"))
    path = folder / name
    path.write_bytes(text.encode("utf-8"))  # byte-exact: CRLF and a missing final newline survive
    return str(path)


def _safe_file_name(name: str | None, default: str) -> str:
    if not name:
        return default
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name)[:80].lstrip(".")
    return stem or default


class Handlers:
    def __init__(self, service: AppService) -> None:
        self.service = service

    # -- model picker ---------------------------------------------------------------------------

    def select_model(self, name: str) -> dict[str, Any]:
        import gradio as gr

        status = self.service.load_model(name)
        return {"model_status": status.text, "timer": gr.Timer(active=not status.ready)}

    def poll_model(self, name: str) -> dict[str, Any]:
        """The model's status; the page stops polling once it is ready or failed."""
        import gradio as gr

        status = self.service.model_status(name)
        return {"model_status": status.text, "timer": gr.Timer(active=status.state in ("loading", "measuring"))}

    # -- Edit tab -------------------------------------------------------------------------------

    def upload(self, path: str | None) -> dict[str, Any]:
        if not path:
            return {"uploaded": None, "upload_name": None}
        name = Path(path).name
        try:
            text = self.service.read_upload(path)
        except InputError as error:
            return {"status": str(error), "uploaded": None, "upload_name": None, "upload": None}
        endings = "CRLF" if "\r\n" in text else ("LF" if "\n" in text else "no")
        final = "ends with a newline" if text.endswith(("\n", "\r")) else "no newline at the end"
        from backend.core.lines import line_count

        return {
            "source": text, "uploaded": text, "upload_name": name,
            "status": f"loaded {name}: {line_count(text):,} lines, {endings} line endings, {final} (kept exactly)",
        }

    def mode_changed(self, mode: str) -> dict[str, Any]:
        import gradio as gr

        return {"target": gr.update(visible=mode == "reference")}

    def run_edit(
        self, model: str, source: str, uploaded: str | None, upload_name: str | None, instruction: str,
        mode: str, target: str | None, max_new_tokens: float, *, session_key: str = "default",
    ) -> Iterator[dict[str, Any]]:
        service = self.service
        request = RunRequest(
            model=model or service.default_model, source=exact_source(source, uploaded),
            instruction=instruction or "", strategy="cad", mode=mode or "model", target=target or None,
            max_new_tokens=int(max_new_tokens or service.limits.default_new_tokens),
        )
        try:
            request = service.prepare(request)
            session = service.new_session(request, kind="edit")
        except (InputError, StorageError) as error:
            yield {"status": str(error)}
            return
        cancel = service.begin_run(session_key)
        yield {
            "stream": [], "program": "", "output": "", "diff": "", "chart": None, "download": None,
            **format_metrics({}), "status": f"running copy-as-decode ({request.mode} mode)…",
        }
        last_chart = 0.0
        step = service.step_seconds(request.model)
        try:
            for snap in service.stream_run(request, session_id=session.id, cancel=cancel):
                update: dict[str, Any] = {
                    "stream": spans_value(snap.spans), "program": snap.program, "output": snap.output,
                    **format_metrics(snap.metrics),
                }
                now = time.monotonic()
                if snap.done or now - last_chart >= CHART_EVERY_S:
                    last_chart = now
                    update["chart"] = charts.tokens_over_time(snap.timeline, step_seconds=step)
                if snap.done:
                    update["diff"] = unified_diff(request.source, snap.output)
                    update["download"] = _write_download(snap.output, _safe_file_name(upload_name, "output.txt"))
                    update["status"] = finish_text(snap, max_new_tokens=request.max_new_tokens)
                elif snap.spans:
                    update["status"] = f"decoding… {snap.wall_seconds:.1f} s"
                else:  # waiting for the model (another run) or reading the prompt
                    update["status"] = f"reading the prompt… {snap.wall_seconds:.1f} s"
                yield update
        except InputError as error:
            yield {"status": str(error)}
        finally:
            service.end_run(session_key, cancel)

    def cancel(self, *, session_key: str = "default", status_key: str = "status") -> dict[str, Any]:
        if self.service.cancel(session_key):
            return {status_key: "cancelling… the partial result will be kept"}
        return {}

    # -- Compare tab ----------------------------------------------------------------------------

    def run_compare(
        self, model: str, source: str, uploaded: str | None, instruction: str, mode: str, target: str | None,
        max_new_tokens: float, *, session_key: str = "default",
    ) -> Iterator[dict[str, Any]]:
        service = self.service
        base = RunRequest(
            model=model or service.default_model, source=exact_source(source, uploaded), instruction=instruction or "",
            strategy="cad", mode=mode or "model", target=target or None,
            max_new_tokens=int(max_new_tokens or service.limits.default_new_tokens),
        )
        try:
            base = service.prepare(base)
            for strategy in ("ar", "pld"):  # each prompt must fit the context too
                service.prepare(RunRequest(**{**base.__dict__, "strategy": strategy}))
            session = service.new_session(base, kind="compare")
        except (InputError, StorageError) as error:
            yield {"c_status": str(error)}
            return
        cancel = service.begin_run(session_key)
        blank: dict[str, Any] = {f"{s}_stream": [] for s in ("ar", "pld", "cad")}
        blank.update({f"{s}_timer": "waiting" for s in ("ar", "pld", "cad")})
        yield {**blank, "c_table": [], "c_chart": None, "c_status": "running plain decoding, prompt lookup, copy-as-decode in turn…"}
        rows: list[dict[str, Any]] = []
        try:
            for strategy in ("ar", "pld", "cad"):
                if cancel.is_set():
                    yield {f"{strategy}_timer": "skipped (cancelled)"}
                    continue
                request = RunRequest(**{**base.__dict__, "strategy": strategy})
                final: Snapshot | None = None
                for snap in service.stream_run(request, session_id=session.id, cancel=cancel):
                    final = snap
                    m = snap.metrics
                    timer = f"{m['elapsed_seconds']:.2f} s · {m['output_tokens']} tokens · {m['forwards']} forwards"
                    if snap.done:
                        reason = getattr(snap.result, "stop_reason", "error")
                        timer = f"done: {timer} ({reason})"
                    else:
                        timer = f"running: {timer}"
                    yield {f"{strategy}_stream": spans_value(snap.spans), f"{strategy}_timer": timer}
                if final is not None:
                    rows.append(self._compare_row(final, base))
                    yield {"c_table": self._compare_table(rows)}
        except InputError as error:
            yield {"c_status": str(error)}
            return
        finally:
            service.end_run(session_key, cancel)
        status = f"compared {len(rows)} strategies · session #{session.id}"
        if base.mode == "reference":
            ok = [r["strategy"] for r in rows if r["produced_target"]]
            status += f" · produced the target: {', '.join(ok) if ok else 'none'} of {len(rows)}"
        if cancel.is_set():
            status += " · cancelled (partial results kept)"
        yield {"c_table": self._compare_table(rows), "c_chart": charts.comparison(rows), "c_status": status}

    @staticmethod
    def _compare_row(snap: Snapshot, request: RunRequest) -> dict[str, Any]:
        m = snap.metrics
        edit: EditRecord | None = snap.extra.get("edit")
        return {
            "strategy": snap.strategy,
            "wall_seconds": float(m.get("elapsed_seconds") or 0.0),
            "forwards": int(m.get("forwards") or 0),
            "tokens_per_second": float(m.get("tokens_per_second") or 0.0),
            "output_tokens": int(m.get("output_tokens") or 0),
            "tokens_copied": int(m.get("tokens_copied") or 0),
            "tokens_generated": int(m.get("tokens_generated") or 0),
            "tokens_tag": int(m.get("tokens_tag") or 0),
            "stop": getattr(snap.result, "stop_reason", "error"),
            "produced_target": request.mode == "reference" and snap.output == request.target,
            "mode": request.mode,
            "edit_id": edit.id if edit else None,
        }

    @staticmethod
    def _compare_table(rows: list[dict[str, Any]]) -> list[list[Any]]:
        plain = next((r["wall_seconds"] for r in rows if r["strategy"] == "ar"), None)
        table = []
        for r in rows:
            speedup = f"{plain / r['wall_seconds']:.2f}×" if plain and r["wall_seconds"] > 0 else "—"
            target = ("✓ yes" if r["produced_target"] else "✗ no") if r["mode"] == "reference" else "(model mode)"
            table.append([
                STRATEGY_LABELS[r["strategy"]], round(r["wall_seconds"], 3), r["forwards"],
                round(r["tokens_per_second"], 1), r["output_tokens"], r["tokens_copied"], r["tokens_generated"],
                r["tokens_tag"], speedup, r["stop"], target, r["edit_id"],
            ])
        return table

    def copy_from_edit(self, source: str, uploaded: str | None, instruction: str, mode: str, target: str) -> dict[str, Any]:
        import gradio as gr

        exact = exact_source(source, uploaded)
        return {
            "c_source": exact, "c_uploaded": exact, "c_instruction": instruction, "c_mode": mode,
            "c_target": gr.update(value=target, visible=mode == "reference"),
        }

    # -- Annotate tab ---------------------------------------------------------------------------

    def load_queue(self, annotator: str) -> dict[str, Any]:
        name = (annotator or "").strip()
        if not name:
            return {"a_status": "enter your annotator name first", "queue": {"ids": [], "pos": 0, "saved": 0}}
        ids = [e.id for e in self.service.storage.annotation_queue(name)]
        queue = {"ids": ids, "pos": 0, "saved": 0, "annotator": name}
        status = f"{len(ids)} edits to label for {name}" if ids else f"nothing left to label for {name}: run edits or import a corpus"
        return {**self._show(queue), "a_status": status}

    def _show(self, queue: dict[str, Any]) -> dict[str, Any]:
        """The current item of the queue (or an empty view), plus progress."""
        import gradio as gr

        ids, pos = queue.get("ids", []), queue.get("pos", 0)
        storage = self.service.storage
        edit = None
        while pos < len(ids):
            edit = storage.get_edit(ids[pos])
            if edit is not None:
                break
            pos += 1  # deleted meanwhile
        queue = {**queue, "pos": pos}
        total = len(ids)
        progress = (
            f"item {min(pos + 1, total)} of {total} · {queue.get('saved', 0)} saved this round"
            if total and pos < total else f"queue done · {queue.get('saved', 0)} saved this round" if total else "queue empty"
        )
        reset = {"a_label": None, "a_error": "none", "a_pref": "none", "a_note": ""}
        if edit is None:
            return {
                "queue": queue, "a_progress": progress, "a_info": "", "a_instruction": "", "a_input": "",
                "a_output": [], "a_diff": "", "a_b_output": gr.update(value="", visible=False),
                "a_pref": gr.update(value="none", visible=False), **{k: v for k, v in reset.items() if k != "a_pref"},
            }
        other = self._other_edit(edit)
        output_value = self._output_spans(edit)
        info = (
            f"edit #{edit.id} · {STRATEGY_LABELS.get(edit.strategy, edit.strategy)} · {edit.mode} mode · {edit.model}"
            + (f" · case {edit.case_id}" if edit.case_id else "")
            + (" · PARTIAL" if edit.partial else "")
        )
        b_label = f"B: {STRATEGY_LABELS.get(other.strategy, other.strategy)} (edit #{other.id})" if other else "B"
        return {
            "queue": queue, "a_progress": progress, "a_info": info, "a_instruction": edit.instruction,
            "a_input": edit.input, "a_output": output_value, "a_diff": unified_diff(edit.input, edit.output),
            "a_b_output": gr.update(value=other.output if other else "", visible=other is not None, label=b_label),
            **reset, "a_pref": gr.update(value="none", visible=other is not None),
        }

    @staticmethod
    def _output_spans(edit: EditRecord) -> list[tuple[str, str | None]]:
        """The output highlighted copy/gen when the stored stream allows it, else plain."""
        spans = edit.events.get("spans") if isinstance(edit.events, dict) else None
        if spans:
            body = [(text, kind) for kind, text in spans if kind in ("copy", "gen")]
            if "".join(t for t, _ in body) == edit.output:
                return merge_spans(body)
        return [(edit.output, None)] if edit.output else []

    def _other_edit(self, edit: EditRecord) -> EditRecord | None:
        """For A/B: another strategy's edit of the same comparison (cad vs plain, else vs cad)."""
        siblings = [e for e in self.service.storage.session_edits(edit.session_id) if e.id != edit.id]
        preferred = "ar" if edit.strategy == "cad" else "cad"
        for sibling in siblings:
            if sibling.strategy == preferred:
                return sibling
        return siblings[0] if siblings and siblings[0].strategy != edit.strategy else None

    def save_annotation(
        self, annotator: str, queue: dict[str, Any], label: str | None, error_kind: str | None,
        preference: str | None, note: str,
    ) -> dict[str, Any]:
        ids, pos = queue.get("ids", []), queue.get("pos", 0)
        if pos >= len(ids):
            return {"a_status": "nothing to save: the queue is done (load it again)"}
        if not label:
            return {"a_status": "choose a label first: 1 correct, 2 partly correct, 3 wrong"}
        edit = self.service.storage.get_edit(ids[pos])
        if edit is None:
            return {**self._show({**queue, "pos": pos + 1}), "a_status": f"edit #{ids[pos]} was deleted; skipped"}
        other = self._other_edit(edit)
        pref = None if preference in (None, "", "none") or other is None else preference
        try:
            saved = self.service.storage.save_annotation(
                edit_id=edit.id, annotator=annotator or queue.get("annotator", ""), label=label,
                error_kind=None if error_kind in (None, "", "none") else error_kind,
                preference=pref, other_edit_id=other.id if pref else None, note=note or "",
            )
        except StorageError as error:
            return {"a_status": str(error)}
        queue = {**queue, "pos": pos + 1, "saved": queue.get("saved", 0) + 1}
        return {**self._show(queue), "a_status": f"saved: edit #{saved.edit_id} = {saved.label} by {saved.annotator}"}

    def skip(self, queue: dict[str, Any]) -> dict[str, Any]:
        ids, pos = queue.get("ids", []), queue.get("pos", 0)
        if pos >= len(ids):
            return {"a_status": "the queue is done"}
        return {**self._show({**queue, "pos": pos + 1}), "a_status": f"skipped edit #{ids[pos]}"}

    def import_corpus(self, annotator: str, corpus: str, count: float) -> dict[str, Any]:
        try:
            session, edits = self.service.import_corpus(corpus, int(count or 0))
        except (InputError, StorageError) as error:
            return {"a_status": str(error)}
        loaded = self.load_queue(annotator) if (annotator or "").strip() else {}
        return {**loaded, "a_status": f"imported {len(edits)} cases of {corpus} as session #{session.id}"}

    def export_annotations(self, kind: str) -> dict[str, Any]:
        storage = self.service.storage
        text = storage.export_annotations_csv() if kind == "csv" else storage.export_annotations_jsonl()
        count = len(storage.annotations())
        return {"a_export": _write_download(text, f"annotations.{kind}"), "a_status": f"exported {count} annotations as {kind.upper()}"}

    def annotator_choices(self) -> dict[str, Any]:
        import gradio as gr

        names = [a.name for a in self.service.storage.annotators()]
        return {
            "k_a": gr.update(choices=names, value=names[0] if names else None),
            "k_b": gr.update(choices=names, value=names[1] if len(names) > 1 else None),
        }

    def kappa(self, annotator_a: str | None, annotator_b: str | None) -> dict[str, Any]:
        if not annotator_a or not annotator_b:
            return {"k_result": "choose two annotators"}
        if annotator_a == annotator_b:
            return {"k_result": "choose two different annotators"}
        result = self.service.storage.agreement(annotator_a, annotator_b)
        return {"k_result": f"{annotator_a} vs {annotator_b}: {result.describe()}"}

    # -- History tab ----------------------------------------------------------------------------

    def history(self) -> dict[str, Any]:
        import gradio as gr

        sessions = self.service.storage.list_sessions()
        rows = [
            [s.id, s.created_at.strftime("%Y-%m-%d %H:%M:%S"), s.kind, s.model, s.mode, s.input_chars,
             s.input_lines, s.output_chars, s.edit_count, "—" if s.speedup is None else f"{s.speedup:.2f}×"]
            for s in sessions
        ]
        choices = [(f"#{s.id} · {s.created_at:%m-%d %H:%M} · {s.kind} · {s.mode} · {s.model}", s.id) for s in sessions]
        return {
            "h_table": rows,
            "h_session": gr.update(choices=choices, value=choices[0][1] if choices else None),
            "h_status": f"{len(sessions)} sessions in {self.service.storage.location}",
        }

    def reopen(self, session_id: int | None) -> dict[str, Any]:
        import gradio as gr

        if session_id is None:
            return {"h_status": "choose a session first"}
        session = self.service.storage.get_session(int(session_id))
        edits = self.service.storage.session_edits(int(session_id))
        if session is None or not edits:
            return {"h_status": f"session #{session_id} has no stored edits (deleted?)"}
        if session.kind == "compare":
            update: dict[str, Any] = {
                "c_source": edits[0].input, "c_uploaded": edits[0].input, "c_instruction": edits[0].instruction,
                "c_mode": session.mode,
                "c_target": gr.update(value=edits[0].target or "", visible=session.mode == "reference"),
            }
            rows = []
            for edit in edits:
                spans = self._stream_spans(edit)
                m = edit.metrics
                update[f"{edit.strategy}_stream"] = spans
                update[f"{edit.strategy}_timer"] = (
                    f"stored: {float(m.get('elapsed_seconds') or 0):.2f} s · {m.get('output_tokens', 0)} tokens · "
                    f"{m.get('forwards', 0)} forwards ({edit.stop_reason})"
                )
                rows.append({
                    "strategy": edit.strategy, "wall_seconds": float(m.get("elapsed_seconds") or 0.0),
                    "forwards": int(m.get("forwards") or 0), "tokens_per_second": float(m.get("tokens_per_second") or 0.0),
                    "output_tokens": int(m.get("output_tokens") or 0), "tokens_copied": int(m.get("tokens_copied") or 0),
                    "tokens_generated": int(m.get("tokens_generated") or 0), "tokens_tag": int(m.get("tokens_tag") or 0),
                    "stop": edit.stop_reason, "produced_target": edit.mode == "reference" and edit.output == edit.target,
                    "mode": edit.mode, "edit_id": edit.id,
                })
            update.update({"c_table": self._compare_table(rows), "c_chart": charts.comparison(rows),
                           "tabs": gr.Tabs(selected="compare"), "h_status": f"reopened comparison #{session.id}",
                           "c_status": f"stored comparison #{session.id}"})
            return update
        edit = edits[-1]
        step = edit.metrics.get("step_seconds")
        timeline = edit.events.get("timeline") or []
        return {
            "source": edit.input, "uploaded": edit.input, "instruction": edit.instruction, "mode": edit.mode,
            "target": gr.update(value=edit.target or "", visible=edit.mode == "reference"),
            "stream": self._stream_spans(edit), "program": edit.program or "", "output": edit.output,
            "diff": unified_diff(edit.input, edit.output), **format_metrics(edit.metrics),
            "chart": charts.tokens_over_time(timeline, step_seconds=step, strategy=edit.strategy),
            "download": _write_download(edit.output, "output.txt"),
            "status": f"reopened edit #{edit.id} from session #{session.id}" + (" (partial)" if edit.partial else ""),
            "tabs": gr.Tabs(selected="edit"), "h_status": f"reopened session #{session.id} in the Edit tab",
        }

    @staticmethod
    def _stream_spans(edit: EditRecord) -> list[tuple[str, str | None]]:
        spans = edit.events.get("spans") if isinstance(edit.events, dict) else None
        if spans:
            return [(text, kind) for kind, text in spans if text]
        return [(edit.output, None)] if edit.output else []

    def delete_session(self, session_id: int | None) -> dict[str, Any]:
        if session_id is None:
            return {"h_status": "choose a session first"}
        deleted = self.service.storage.delete_session(int(session_id))
        listing = self.history()
        listing["h_status"] = f"deleted session #{session_id}" if deleted else f"session #{session_id} was already gone"
        return listing

    def export_sessions(self, session_id: int | None, *, everything: bool) -> dict[str, Any]:
        storage = self.service.storage
        if everything:
            text, name = storage.export_sessions_jsonl(), "sessions.jsonl"
        elif session_id is None:
            return {"h_status": "choose a session first"}
        else:
            text, name = storage.export_sessions_jsonl([int(session_id)]), f"session-{int(session_id)}.jsonl"
        lines = text.count("\n")
        return {"h_export": _write_download(text, name), "h_status": f"exported {lines} session(s) as JSONL"}

