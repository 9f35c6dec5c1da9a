"""How a run is put into words and widget values: diffs, metrics, the finish line. Pure functions.

Nothing here builds HTML: user text goes back as plain strings and (text, kind) pairs, which the
components render as text.
"""

from __future__ import annotations

import difflib
from typing import Any

from app.progress import Snapshot
from backend.storage import EditRecord

STRATEGY_LABELS = {"ar": "plain decoding", "pld": "prompt lookup", "cad": "copy-as-decode"}
METRIC_NAMES = ("elapsed", "copied", "generated", "tag", "forwards", "rate", "plain", "speedup")
# A cad run in model mode that stopped for one of these did not produce a finished, valid program.
FAILED_STOPS = {
    "loop": "the model repeated itself (the same span again and again) and was stopped early",
    "max_tokens": "the model did not finish its program within the max new tokens limit{limit}",
    "error": "the model's program is invalid",
    "time_limit": "the run reached the time limit before the model finished",
}


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def exact_source(textbox: str | None, uploaded: str | None) -> str:
    """The uploaded file's exact text when the textbox still shows it (a browser textarea turns CRLF
    into LF), else the textbox as typed."""
    textbox = textbox or ""
    if uploaded and normalise_newlines(uploaded) == normalise_newlines(textbox):
        return uploaded
    return textbox


def line_endings(text: str) -> str:
    """ "CRLF", "LF", "CR", "mixed" or "none"."""
    crlf = text.count("\r\n")
    lf, cr = text.count("\n") - crlf, text.count("\r") - crlf
    kinds = [name for name, count in (("CRLF", crlf), ("LF", lf), ("CR", cr)) if count]
    return kinds[0] if len(kinds) == 1 else ("mixed" if kinds else "none")


def adopt_line_endings(source: str, target: str) -> tuple[str, str | None]:
    """A typed desired result in the input's line endings: a browser textarea turns CRLF into LF, so a
    CRLF input's target would share no line with it (the oracle would copy nothing). Returns the
    target and a note saying what changed (None when nothing did)."""
    if line_endings(source) == "CRLF" and line_endings(target) == "LF":
        return target.replace("\n", "\r\n"), "the desired result's LF line endings became CRLF, as in the input"
    return target, None


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


def format_metrics(metrics: dict[str, Any], *, failed: bool = False, unchanged: bool = False) -> dict[str, str]:
    """Metric name -> text. A failed run, or one that changed nothing (`is_unchanged`), shows no
    speed-up: its output is not the edit asked for."""
    def seconds(value: Any) -> str:
        return "—" if value is None else f"{float(value):.2f} s"

    speedup = metrics.get("speedup")
    claim = "—" if speedup is None else f"{float(speedup):.2f}×"
    return {
        "elapsed": seconds(metrics.get("elapsed_seconds")),
        "copied": str(metrics.get("tokens_copied", 0)),
        "generated": str(metrics.get("tokens_generated", 0)),
        "tag": str(metrics.get("tokens_tag", 0)),
        "forwards": str(metrics.get("forwards", 0)),
        "rate": f"{float(metrics.get('tokens_per_second') or 0.0):.1f}",
        "plain": seconds(metrics.get("estimated_plain_seconds")) + _basis_tag(metrics.get("plain_estimate_basis")),
        "speedup": "— (failed)" if failed else ("— (no change)" if unchanged else claim),
    }


def _basis_tag(basis: Any) -> str:
    """A short mark of what the plain-decoding estimate rests on (the status line says it in full)."""
    if not basis:
        return ""
    return " (this run's steps)" if str(basis).startswith("median of this run") else " (step at load)"


def spans_value(spans: Any) -> list[tuple[str, str | None]]:
    return [(text, kind) for text, kind in spans if text]


def stop_reason(snapshot: Snapshot) -> str:
    if "stop_reason" in snapshot.extra:
        return str(snapshot.extra["stop_reason"])
    return "error" if snapshot.result is None else str(snapshot.result.stop_reason)


def is_failure(snapshot: Snapshot, mode: str) -> bool:
    """A model-mode cad run that did not end with a finished, valid program (or any failed run)."""
    stop = stop_reason(snapshot)
    if snapshot.result is None or stop in ("error", "loop", "time_limit"):
        return True
    return mode == "model" and snapshot.strategy == "cad" and stop == "max_tokens"


def changed_nothing(mode: str, output: str, source: str | None) -> bool:
    """A model-mode output equal to the input: the instruction was not carried out (the shipped
    model's most common failure: a gen repeating the line it stands for)."""
    return mode == "model" and source is not None and output == source


def is_unchanged(snapshot: Snapshot, mode: str, source: str | None) -> bool:
    """A model-mode run that finished (not failed, not cancelled) and `changed_nothing`."""
    return (snapshot.result is not None and not is_failure(snapshot, mode) and stop_reason(snapshot) != "cancel"
            and changed_nothing(mode, snapshot.result.output, source))


def _head(snapshot: Snapshot, mode: str, max_new_tokens: int | None, run_seconds: float | None,
          source: str | None = None) -> str:
    result, stop = snapshot.result, stop_reason(snapshot)
    elapsed = float(snapshot.metrics.get("elapsed_seconds") or 0.0)
    prefill = snapshot.metrics.get("prefill_seconds")
    timing = f"{elapsed:.2f} s decoding" + (f" + {float(prefill):.2f} s reading the prompt" if prefill is not None else "")
    reused, prompt = snapshot.metrics.get("prompt_reused_tokens"), snapshot.metrics.get("prompt_tokens")
    if prefill is not None and reused and prompt:
        timing += f" ({int(reused):,} of its {int(prompt):,} tokens kept from the last run)"
    if stop == "cancel":  # wall time: a cancel while reading the prompt stops before any decoding
        return f"cancelled after {snapshot.wall_seconds:.2f} s — partial result kept"
    if is_failure(snapshot, mode):
        why = FAILED_STOPS.get(stop, "the run failed").format(limit=f" ({max_new_tokens})" if max_new_tokens else "")
        if stop == "time_limit" and run_seconds:
            why += f" ({run_seconds:g} s)"
        detail = snapshot.error or (result.error if result is not None else None)
        return (f"FAILED: {why}" + (f": {detail}" if detail else "") + f" · after {timing} · what it produced is kept, "
                f"marked partial{aligner_text(snapshot.metrics)}{window_text(snapshot.metrics)}"
                f"{retry_text(snapshot.metrics)}")
    if is_unchanged(snapshot, mode, source):
        return (f"NO CHANGE: the model's program copies the input unchanged, so the instruction was not "
                f"carried out · after {timing} · try rewording the instruction or name the line"
                f"{aligner_text(snapshot.metrics)}{window_text(snapshot.metrics)}{retry_text(snapshot.metrics)}")
    if stop == "max_tokens":
        limit = f" ({max_new_tokens})" if max_new_tokens else ""
        return f"stopped at the max new tokens limit{limit} after {timing} — partial result"
    head = f"done in {timing} ({stop})"
    basis = snapshot.metrics.get("plain_estimate_basis")
    if basis and snapshot.metrics.get("speedup") is not None:
        head += f"; speed-up is an estimate: plain decoding priced at the {basis} per output token"
    rest = snapshot.metrics.get("copied_rest")
    if rest:  # backend/runtime/early_end.py: the program ended before the input did
        head += f"; the model's program ended early, so input lines {rest} were copied unchanged"
    head += aligner_text(snapshot.metrics) + window_text(snapshot.metrics) + retry_text(snapshot.metrics)
    head += shape_text(snapshot.metrics)
    head += backward_text(snapshot.metrics)
    return head + (f"; note: {result.error}" if result is not None and result.error else "")


def aligner_text(metrics: dict[str, Any]) -> str:
    """Who wrote a model-mode edit when the instruction carried an update snippet
    (backend/core/snippet_apply.py), in plain words; "" otherwise."""
    if metrics.get("written_by") == "snippet aligner":
        return ("; written by the snippet aligner, not the model: the update snippet or diff in the instruction "
                "was placed by its unchanged lines and merged, then replayed (copies as prefills)")
    declined = metrics.get("aligner_declined")
    if declined:
        return f"; the snippet aligner left this edit to the model: {declined}"
    return ""


def window_text(metrics: dict[str, Any]) -> str:
    """That a model-mode input too long for the model's context was edited through a window of it
    (backend/core/window.py), in plain words; "" otherwise."""
    window = metrics.get("window")
    if not window:
        return ""
    return (f"; the input is longer than the model's context, so the model was shown {window} (the part the "
            f"instruction is most about) and the lines outside it were kept as they are")


def retry_text(metrics: dict[str, Any]) -> str:
    """That a windowed edit is a second try (backend/runtime/window_retry.py), in plain words and
    with what the first cost; "" otherwise."""
    note = metrics.get("window_retry")
    if not note:
        return ""
    spent = metrics.get("retry_seconds")
    cost = f"; the first try's {spent:.1f} s are counted in the time and speed-up" if spent else ""
    return f"; {note}{cost}"


def shape_text(metrics: dict[str, Any]) -> str:
    """Whether the decoder held a model-mode program to the shape its instruction fixes
    (backend/runtime/shape_guard.py), in plain words; "" when it never had to."""
    refused = metrics.get("shape_refused") or 0
    if not refused:
        return ""
    return (f"; the instruction says which lines change, so the decoder kept the program to them "
            f"({refused} of the model's choices refused)")


def backward_text(metrics: dict[str, Any]) -> str:
    """Whether the decoder kept a model-mode program's copies moving forward (backend/core/copy_order.py),
    in plain words; "" when the model never tried to copy lines again."""
    refused = metrics.get("backward_refused") or 0
    said = (f"; the model tried to copy lines it had already copied, and the decoder kept its copies moving "
            f"forward ({refused} of its choices refused)") if refused else ""
    past = metrics.get("past_end_refused") or 0
    if past:
        said += (f"; the model went on past the input's last line, and the decoder ended its program after one "
                 f"more gen ({past} of its choices refused)")
    return said


def finish_text(snapshot: Snapshot, *, mode: str = "reference", max_new_tokens: int | None = None,
                run_seconds: float | None = None, source: str | None = None) -> str:
    """The status line of a finished run, in plain words: outcome · saved or not · first span.
    `source` (the input) lets a model-mode run that changed nothing say so."""
    extra = snapshot.extra
    edit: EditRecord | None = extra.get("edit")
    if edit is not None:
        saved = f"saved as edit #{edit.id}" + (" (marked partial)" if edit.partial else "")
    else:
        saved = f"NOT saved: {extra.get('save_error', 'unknown error')}"
    first = snapshot.first_span_seconds
    first_text = f" · first span after {first:.2f} s" if first is not None else ""
    return f"{_head(snapshot, mode, max_new_tokens, run_seconds, source)} · {saved}{first_text}"
