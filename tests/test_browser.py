"""The web app in a real browser: Debian chromium through Playwright, the real `python -m app` server on
loopback (tiny-random model, a temp SQLite file).

Covers: the page loads and the model becomes ready; a reference-mode edit streams copy (blue) and gen
(orange) spans and fills the metrics; a comparison of the strategies (prompt lookup at its defaults and tuned); annotating an edit with
the keyboard and finding the row in the database; HTML/script in the input shown literally, running
nothing. Screenshots go to test-artifacts/ (gitignored); docs/screenshot-edit.png (the README's) is
written when missing or with COPY_AS_DECODE_UPDATE_SCREENSHOT=1. The measured
time to first span and streaming update rate go to test-artifacts/browser-measurements.json.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from app_fixtures import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, REPO, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# tiny-random by default (fast; reference mode still shows real copies). Set
# COPY_AS_DECODE_BROWSER_MODEL=smollm2-135m to measure the embedded model in the browser.
MODEL = os.environ.get("COPY_AS_DECODE_BROWSER_MODEL", "tiny-random")

COPY_RGB = "rgba(0, 114, 178"
GEN_RGB = "rgba(230, 159, 0"
SOURCE = (
    "def total_price(items, tax_rate):\n"
    '    """Sum the prices of all items and add the tax; prices are in cents."""\n'
    "    subtotal = 0\n"
    "    for item in items:\n"
    "        subtotal += item.price * item.quantity\n"
    "    tax = round(subtotal * tax_rate)\n"
    "    return subtotal + tax\n"
    "\n"
    "\n"
    "def describe(order):\n"
    "    return f'{len(order.items)} items, {total_price(order.items, 0.2)} cents'\n"
)
TARGET = (
    SOURCE.replace("def total_price(items, tax_rate):", "def total_price(items, tax_rate=0.2):")
    .replace("total_price(order.items, 0.2)", "total_price(order.items)")
)
XSS = "<img src=x onerror=alert(1)>"
XSS_FLAG = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'

# Records every change of the decode stream's text with a timestamp (performance.now()).
WATCH_STREAM = """
() => {
  const stream = document.querySelector('#edit-stream');
  window.__streamLog = [];
  window.__observer && window.__observer.disconnect();
  window.__observer = new MutationObserver(() => {
    const log = window.__streamLog;
    const length = stream.querySelectorAll('.token').length ? stream.textContent.length : 0;
    if (!log.length || log[log.length - 1].length !== length) log.push({t: performance.now(), length});
  });
  window.__observer.observe(stream, {subtree: true, childList: true, characterData: true});
  window.__clicked = performance.now();
}
"""


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's chromium (Playwright's own download cannot work offline); see ../shared/STACK.md."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS, "headless": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("browser"), model=MODEL) as app_server:
        yield app_server


@pytest.fixture(scope="module")
def dialogs():
    return []


@pytest.fixture(scope="module")
def app_page(browser, server, dialogs):
    """One page for the whole module (the tests build on each other, in order), dialogs recorded."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)

    def on_dialog(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(server.url)
    page.wait_for_selector("#edit-input textarea")
    yield page
    context.close()


def _db(server, query, *args):
    connection = sqlite3.connect(server.db_path)
    try:
        return connection.execute(query, args).fetchall()
    finally:
        connection.close()


def _textarea(page, elem_id):
    return page.locator(f"#{elem_id} textarea").first


def _status(page, elem_id):
    return _textarea(page, elem_id).input_value()


def _wait_status(page, elem_id, needle, timeout=90_000):
    page.wait_for_function(
        "([id, needle]) => { const t = document.querySelector('#' + id + ' textarea');"
        " return t && t.value.includes(needle); }",
        arg=[elem_id, needle], timeout=timeout,
    )


def _run_reference_edit(page, source, instruction, target):
    _textarea(page, "edit-input").fill(source)
    _textarea(page, "edit-instruction").fill(instruction)
    page.locator('#edit-mode input[value="reference"]').check()
    _textarea(page, "edit-target").fill(target)
    before = _status(page, "edit-status")
    page.evaluate(WATCH_STREAM)
    page.click("#edit-run")
    page.wait_for_function(  # a new "saved as edit #N", not the previous run's
        "([before]) => { const v = document.querySelector('#edit-status textarea').value;"
        " return v !== before && v.includes('saved as edit #'); }",
        arg=[before], timeout=90_000,
    )


def test_page_loads_and_the_model_becomes_ready(app_page):
    page = app_page
    for tab in ("Edit", "Compare", "Annotate", "History"):
        assert page.get_by_role("tab", name=tab, exact=True).is_visible()
    _wait_status(page, "model-status", f"ready: {MODEL}")
    assert "copy: copied from the input" in page.locator(".cad-legend").first.inner_text()
    assert page.locator("#model-picker input").input_value()  # the entry's label


def test_a_model_mode_update_snippet_is_merged_by_the_aligner(app_page, server):
    """Fast-apply in the browser: model mode, the instruction an update snippet; the aligner merges
    it, the merge streams as copies and gens, and the status says the model did not write it."""
    page = app_page
    snippet = ("Apply this update:\n```python\n# ... existing code ...\n    tax = round(subtotal * tax_rate)\n"
               "    return subtotal + tax + 1\n\n\ndef describe(order):\n# ... existing code ...\n```")
    expected = SOURCE.replace("    return subtotal + tax\n", "    return subtotal + tax + 1\n")
    _textarea(page, "edit-input").fill(SOURCE)
    _textarea(page, "edit-instruction").fill(snippet)
    page.locator('#edit-mode input[value="model"]').check()
    before = _status(page, "edit-status")
    page.click("#edit-run")
    page.wait_for_function(
        "([before]) => { const v = document.querySelector('#edit-status textarea').value;"
        " return v !== before && v.includes('saved as edit #'); }",
        arg=[before], timeout=90_000,
    )
    status = _status(page, "edit-status")
    assert "written by the snippet aligner, not the model" in status, status
    assert _textarea(page, "edit-output").input_value() == expected
    tokens = page.locator("#edit-stream .token")
    styles = [tokens.nth(i).get_attribute("style") or "" for i in range(tokens.count())]
    assert any(COPY_RGB in s for s in styles) and any(GEN_RGB in s for s in styles), styles
    edit_id = int(status.split("saved as edit #", 1)[1].split()[0])
    (row,) = _db(server, "select output, mode from edits where id = ?", edit_id)
    assert row == (expected, "model")
    page.screenshot(path=str(ARTIFACTS / "browser-fast-apply.png"), full_page=True)


def test_reference_edit_streams_copy_and_gen_spans_and_fills_metrics(app_page, server):
    page = app_page
    # Warm-up run (first use builds the model's grammar tables), then the measured one.
    _run_reference_edit(page, SOURCE, "Give tax_rate a default of 0.2.", TARGET)
    _run_reference_edit(page, SOURCE, "Give tax_rate a default of 0.2.", TARGET)

    tokens = page.locator("#edit-stream .token")
    styles = [tokens.nth(i).get_attribute("style") or "" for i in range(tokens.count())]
    assert any(COPY_RGB in s for s in styles), styles
    assert any(GEN_RGB in s for s in styles), styles
    copied = " ".join(
        tokens.nth(i).inner_text() for i in range(tokens.count()) if COPY_RGB in styles[i]
    )
    assert "subtotal += item.price * item.quantity" in copied
    legend = page.locator("#edit-stream [data-testid='highlighted-text:category-legend']").inner_text()
    assert {"copy", "gen", "tag"} <= set(legend.split())
    for metric in ("elapsed", "rate", "plain", "speedup", "copied", "generated", "tag", "forwards"):
        value = _textarea(page, f"metric-{metric}").input_value()
        assert value not in ("", "—"), (metric, value)
    assert _textarea(page, "metric-speedup").input_value().endswith("×")
    assert int(_textarea(page, "metric-copied").input_value()) > 0
    assert _textarea(page, "edit-output").input_value() == TARGET
    page.wait_for_selector("#edit-chart .js-plotly-plot")

    status = _status(page, "edit-status")
    edit_id = int(status.split("saved as edit #", 1)[1].split()[0])
    (row,) = _db(server, "select output, mode, strategy, partial from edits where id = ?", edit_id)
    assert row == (TARGET, "reference", "cad", 0)

    log = page.evaluate("() => ({clicked: window.__clicked, log: window.__streamLog})")
    entries = log["log"]
    cleared = next(i for i, entry in enumerate(entries) if entry["length"] == 0)  # the run starts by clearing
    changes = [entry for entry in entries[cleared:] if entry["length"] > 0]
    first_span_ms = changes[0]["t"] - log["clicked"]
    span_ms = changes[-1]["t"] - changes[0]["t"]
    rate = (len(changes) - 1) / (span_ms / 1000) if span_ms > 0 else None
    measurements = {
        "model": MODEL, "mode": "reference", "input_chars": len(SOURCE),
        "time_to_first_span_ms": round(first_span_ms), "stream_updates": len(changes),
        "streaming_span_ms": round(span_ms), "updates_per_second": rate and round(rate, 1),
        "server_status": status,
    }
    (ARTIFACTS / "browser-measurements.json").write_text(json.dumps(measurements, indent=2) + "\n")
    print("browser measurements:", json.dumps(measurements))
    assert first_span_ms < 15_000

    page.screenshot(path=str(ARTIFACTS / "browser-edit.png"), full_page=True)
    readme_shot = REPO / "docs" / "screenshot-edit.png"  # tracked: rewritten only on request or when missing
    if os.environ.get("COPY_AS_DECODE_UPDATE_SCREENSHOT") == "1" or not readme_shot.exists():
        page.evaluate("() => window.scrollTo(0, 0)")
        page.set_viewport_size({"width": 1400, "height": 1250})
        page.screenshot(path=str(readme_shot), full_page=False)
        page.set_viewport_size({"width": 1400, "height": 1000})

    with page.expect_download() as download:
        page.click("#edit-download")
    assert download.value.path().read_text(encoding="utf-8") == TARGET


def test_comparison_runs_four_and_checks_the_target(app_page, server):
    page = app_page
    page.get_by_role("tab", name="Compare", exact=True).click()
    page.click("#cmp-copy")
    page.wait_for_function("document.querySelector('#cmp-input textarea').value.length > 0")
    assert page.locator('#cmp-mode input[value="reference"]').is_checked()
    page.click("#cmp-run")
    _wait_status(page, "cmp-status", "compared 4 runs", timeout=120_000)
    assert "produced the target: ar, pld, pld-tuned, cad of 4" in _status(page, "cmp-status")
    for strategy in ("ar", "pld", "pld-tuned", "cad"):
        assert _textarea(page, f"cmp-{strategy}-timer").input_value().startswith("done:")
        assert page.locator(f"#cmp-{strategy}-stream .token").count() > 0
    table = page.locator("#cmp-table").inner_text()
    for name in ("plain decoding", "prompt lookup 2-gram/10", "prompt lookup 3-gram/64", "copy-as-decode"):
        assert name in table
    assert table.count("✓ yes") == 4
    page.wait_for_selector("#cmp-chart .js-plotly-plot")
    assert _db(server, "select count(*) from sessions where kind = 'compare'") == [(1,)]
    page.screenshot(path=str(ARTIFACTS / "browser-compare.png"), full_page=True)


def test_annotate_an_edit_with_the_keyboard_and_see_it_stored(app_page, server):
    page = app_page
    page.get_by_role("tab", name="Annotate", exact=True).click()
    name = page.locator("#ann-name textarea, #ann-name input").first
    name.fill("alice")
    name.press("Enter")  # loads the queue
    _wait_status(page, "ann-status", "edits to label for alice")
    info = _textarea(page, "ann-info").input_value()
    edit_id = int(info.split("#", 1)[1].split()[0])
    assert "item 1 of" in _textarea(page, "ann-progress").input_value()

    _textarea(page, "ann-note").fill("default argument added; copies right")
    page.keyboard.press("Escape")          # leave the text field: shortcuts are live again
    page.keyboard.press("2")               # partly correct
    page.keyboard.press("e")               # error kind -> span selection
    assert page.locator('#ann-label input[value="partly_correct"]').is_checked()
    assert page.locator('#ann-error input[value="span_selection"]').is_checked()
    page.keyboard.press("Enter")           # save
    _wait_status(page, "ann-status", f"saved: edit #{edit_id} = partly_correct by alice")
    rows = _db(
        server,
        "select a.edit_id, a.label, a.error_kind, a.note, n.name from annotations a "
        "join annotators n on n.id = a.annotator_id",
    )
    assert rows == [(edit_id, "partly_correct", "span_selection", "default argument added; copies right", "alice")]
    assert "1 saved this round" in _textarea(page, "ann-progress").input_value()

    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("s")               # skip
    _wait_status(page, "ann-status", "skipped edit #")

    page.click("#ann-export-jsonl")
    _wait_status(page, "ann-status", "exported 1 annotations as JSONL")
    with page.expect_download() as download:
        page.click("#ann-export")
    exported = [json.loads(line) for line in download.value.path().read_text(encoding="utf-8").splitlines()]
    assert exported[0]["edit_id"] == edit_id and exported[0]["label"] == "partly_correct"
    page.screenshot(path=str(ARTIFACTS / "browser-annotate.png"), full_page=True)


def test_html_in_the_input_is_shown_literally_and_runs_nothing(app_page, server, dialogs):
    page = app_page
    page.get_by_role("tab", name="Edit", exact=True).click()
    source = f"{XSS}\n{XSS_FLAG}\nkeep this line\n"
    target = f"{XSS}\n{XSS_FLAG}\nkeep this line too\n"
    _run_reference_edit(page, source, XSS, target)
    stream_text = page.locator("#edit-stream .textfield").inner_text()
    assert XSS in stream_text and "<script>window.__pwned=2</script>" in stream_text
    assert _textarea(page, "edit-output").input_value() == target
    page.get_by_role("tab", name="Diff against input", exact=True).click()
    diff = page.locator("#edit-diff").inner_text()
    assert "+keep this line too" in diff and XSS in diff
    page.get_by_role("tab", name="Output", exact=True).click()
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("#edit-stream script, #edit-stream img").count() == 0

    # The same text in the History and Annotate views.
    page.get_by_role("tab", name="History", exact=True).click()
    page.click("#hist-refresh")
    _wait_status(page, "hist-status", "sessions in")
    page.get_by_role("tab", name="Annotate", exact=True).click()
    page.click("#ann-load")
    _wait_status(page, "ann-status", "edits to label for alice")
    for _ in range(10):  # walk the queue to the XSS edit
        if XSS in _textarea(page, "ann-input").input_value():
            break
        page.click("#ann-skip")
        page.wait_for_timeout(400)
    assert _textarea(page, "ann-input").input_value() == source
    assert XSS in page.locator("#ann-output .textfield").inner_text()
    assert page.locator("img[src='x']").count() == 0

    page.wait_for_timeout(500)  # let any (wrongly) injected handler fire
    assert dialogs == []
    assert page.evaluate("() => window.__pwned") is None
    page.screenshot(path=str(ARTIFACTS / "browser-xss.png"), full_page=True)


def test_cancel_is_inactive_when_idle_and_delete_asks_first(app_page, server):
    page = app_page
    page.get_by_role("tab", name="Edit", exact=True).click()
    assert page.locator("#edit-cancel").is_disabled()  # nothing runs: Cancel does not look active
    page.get_by_role("tab", name="History", exact=True).click()
    page.click("#hist-refresh")
    _wait_status(page, "hist-status", "sessions in the database")
    assert str(server.db_path) not in _status(page, "hist-status")  # no server path on the page
    before = _db(server, "select count(*) from sessions")
    page.click("#hist-delete")
    _wait_status(page, "hist-status", "confirm: delete session #")
    assert "edit(s)" in page.locator("#hist-confirm").first.inner_text()
    page.click("#hist-keep")
    _wait_status(page, "hist-status", "nothing deleted")
    assert _db(server, "select count(*) from sessions") == before
