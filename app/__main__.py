"""`python -m app [--host 127.0.0.1] [--port 7860] [--model NAME] [--db-url URL] ...`: serve the web app.
`python -m app loadtest [--clients N] [--edits K] [--kill-restart]`: the load-and-fault harness
(app/loadtest.py) against a fresh server and database of its own.

The model loads in a background thread; the page says "loading model…" until it is ready.
Serving beyond loopback needs a login (app/security.py) or an explicit, loudly logged opt-out.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def build_parser() -> argparse.ArgumentParser:
    from app.security import AUTH_ENV
    from backend.runtime.request import APP_LIMITS as defaults
    from backend.runtime.runtimes import AUTO_HELP, DEFAULT_RUNTIME, RUNTIME_CHOICES

    parser = argparse.ArgumentParser(
        prog="python -m app", description="Serve the copy-as-decode web app (Gradio) on this machine."
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1",
        help="address to serve on (default 127.0.0.1: this machine only; any other needs a login)")
    add("--port", type=int, default=7860, help="port (default 7860)")
    add("--auth-file", default=None, help=f"file of user:password lines (or set ${AUTH_ENV}=user:password)")
    add("--insecure-no-auth", action="store_true",
        help="serve a non-loopback --host WITHOUT a login (anyone reaching the port can read and delete everything)")
    add("--model", default=None, help="models.yaml entry to load first (default: its default)")
    add("--db-url", default=None,
        help="SQLAlchemy URL or SQLite file path (default $COPY_AS_DECODE_DB or var/copy_as_decode.sqlite3)")
    add("--max-input-chars", type=int, default=defaults.max_source_chars,
        help=f"longest input accepted, in characters (default {defaults.max_source_chars:,})")
    add("--max-input-lines", type=int, default=defaults.max_source_lines,
        help=f"most input lines accepted (default {defaults.max_source_lines:,})")
    add("--max-new-tokens", type=int, default=defaults.max_new_tokens,
        help=f"the most new tokens a user may ask for (default {defaults.max_new_tokens:,})")
    add("--default-new-tokens", type=int, default=defaults.default_new_tokens,
        help=f"the new-token slider's starting value (default {defaults.default_new_tokens})")
    add("--max-waiting", type=int, default=8, help="runs that may wait for the model; more are told busy (default 8)")
    add("--run-seconds", type=float, default=300.0, help="one run's time budget on the model (default 300)")
    add("--include-random", action="store_true", help="also list random-weight models (timing only) in the picker")
    add("--data-dir", default=None, help="corpora directory for the Annotate tab's import")
    # issue 11: who runs the model (docs/DEPLOY.md)
    add("--runtime", choices=RUNTIME_CHOICES, default=DEFAULT_RUNTIME, help=f"in-process runtime, per model: {AUTO_HELP}")
    add("--engine-url", default=None, help="a vLLM / SGLang / llama.cpp server to decode on instead (http://host:port)")
    add("--engine-kind", choices=("vllm", "sglang", "llamacpp"), default=None, help="the server's kind, with --engine-url")
    add("--no-align-snippets", action="store_true",
        help="model mode: let the model write every edit (default: an update snippet with `... existing code ...` "
             "markers or a unified diff that the snippet aligner places with certainty is merged by it, and the "
             "status says so)")
    add("--no-shape-guard", "--no-rename-guard", dest="no_shape_guard", action="store_true",
        help="model mode: let the program leave the shape the instruction fixes (default: a rename, "
             "\"Delete lines 4-6\", \"Add `x` after line 9\", \"Change 1 to 2 on line 12\" keep their lines, and the "
             "model writes only the new text; backend/runtime/shape_guard.py)")
    add("--tuned-lookup", default=None, metavar="N/K",
        help="the tuned prompt-lookup setting the Compare tab runs beside the 2/10 defaults "
             "(default: the bench's fastest on held-out commit edits, see docs/results.md)")
    add("--update-interval", type=float, default=0.2,
        help="seconds between page updates while streaming (default 0.2; the browser's rendering shares the CPU "
             "with the model)")
    return parser


def _check(args: argparse.Namespace) -> str | None:
    """The first thing wrong with the arguments, as an error line; None when all is well."""
    for flag in ("max_input_chars", "max_input_lines", "max_new_tokens", "default_new_tokens", "max_waiting"):
        if getattr(args, flag) < 1:
            return f"--{flag.replace('_', '-')} must be at least 1"
    if not args.run_seconds > 0:
        return "--run-seconds must be a positive number of seconds"
    if args.tuned_lookup is not None:
        from backend.runtime.prompt_lookup import MAX_DRAFTS, MAX_NGRAM, parse_setting

        try:
            setting = parse_setting(args.tuned_lookup)
        except ValueError as error:
            return f"--tuned-lookup: {error}"
        if setting.ngram > MAX_NGRAM or setting.drafts > MAX_DRAFTS:
            return f"--tuned-lookup: at most {MAX_NGRAM}-gram/{MAX_DRAFTS}"
    if bool(args.engine_url) != bool(args.engine_kind):
        return "--engine-url and --engine-kind go together"
    if args.model:
        from backend.runtime.models import UnknownModel, spec_for

        try:
            spec_for(args.model)  # an entry, a save_pretrained directory or an adapter `train` wrote
        except UnknownModel as error:
            return str(error)
    return None


def _tuned_lookup(text: str | None) -> dict[str, Any]:
    """AppConfig's tuned_lookup keyword from `--tuned-lookup N/K`; none (the default) when not given."""
    from backend.runtime.prompt_lookup import parse_setting

    if text is None:
        return {}
    setting = parse_setting(text)
    return {"tuned_lookup": (setting.ngram, setting.drafts)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["loadtest"]:
        from app.loadtest import main as loadtest_main

        return loadtest_main(argv[1:])
    args = build_parser().parse_args(argv)
    problem = _check(args)
    from app.security import AccessError, resolve_access

    try:
        access = resolve_access(args.host, auth_file=args.auth_file, insecure_no_auth=args.insecure_no_auth)
    except AccessError as error:
        problem = problem or str(error)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if access.warning:
        print(f"\n{'!' * 100}\n{access.warning}\n{'!' * 100}\n", file=sys.stderr, flush=True)
    serve(args, access.credentials)
    return 0


def serve(args: argparse.Namespace, credentials: tuple[tuple[str, str], ...]) -> None:
    from dataclasses import replace

    from app.service import AppConfig, AppService
    from app.ui import build_ui, launch
    from backend.runtime.request import APP_LIMITS

    limits = replace(
        APP_LIMITS, max_source_chars=args.max_input_chars, max_target_chars=args.max_input_chars,
        max_source_lines=args.max_input_lines, max_new_tokens=args.max_new_tokens,
        default_new_tokens=min(args.default_new_tokens, args.max_new_tokens),
    )
    config = AppConfig(model=args.model, db_url=args.db_url, limits=limits, include_random=args.include_random,
                       data_dir=args.data_dir, update_interval_s=max(0.02, args.update_interval),
                       max_waiting=args.max_waiting, run_seconds=args.run_seconds,
                       runtime=args.runtime, engine_url=args.engine_url, engine_kind=args.engine_kind,
                       align_snippets=not args.no_align_snippets, guard_shapes=not args.no_shape_guard,
                       **_tuned_lookup(args.tuned_lookup))
    service = AppService(config)
    print(f"database: {service.storage.location}", flush=True)  # the operator's log only, never the page
    if service.interrupted_at_start:
        print(f"marked {service.interrupted_at_start} run(s) left unfinished by a stopped server as interrupted",
              flush=True)
    service.load_model()  # background: the page opens at once and says "loading model…"
    threading.Thread(
        target=lambda: print(f"model {service.wait_until_ready().text}", flush=True), daemon=True
    ).start()
    try:
        launch(build_ui(service), host=args.host, port=args.port, max_waiting=args.max_waiting,
               auth=list(credentials) or None)
    finally:
        service.close()


if __name__ == "__main__":
    sys.exit(main())
