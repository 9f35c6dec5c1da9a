"""`python -m app [--host 127.0.0.1] [--port 7860] [--model NAME] [--db-url URL]`: serve the web app.

The model loads in a background thread; the page says "loading model…" until it is ready.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def build_parser() -> argparse.ArgumentParser:
    from app.service import Limits

    defaults = Limits()
    parser = argparse.ArgumentParser(
        prog="python -m app", description="Serve the copy-as-decode web app (Gradio) on this machine."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument("--model", default=None, help="models.yaml entry to load first (default: its default)")
    parser.add_argument("--db-url", default=None,
                        help="SQLAlchemy URL or SQLite file path (default $COPY_AS_DECODE_DB or var/copy_as_decode.sqlite3)")
    parser.add_argument("--max-input-chars", type=int, default=defaults.max_input_chars,
                        help=f"longest input accepted, in characters (default {defaults.max_input_chars:,})")
    parser.add_argument("--max-input-lines", type=int, default=defaults.max_input_lines,
                        help=f"most input lines accepted (default {defaults.max_input_lines:,})")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                        help=f"the most new tokens a user may ask for (default {defaults.max_new_tokens:,})")
    parser.add_argument("--default-new-tokens", type=int, default=defaults.default_new_tokens,
                        help=f"the new-token slider's starting value (default {defaults.default_new_tokens})")
    parser.add_argument("--include-random", action="store_true",
                        help="also list random-weight models (timing only) in the picker")
    parser.add_argument("--data-dir", default=None, help="corpora directory for the Annotate tab's import")
    parser.add_argument("--update-interval", type=float, default=0.2,
                        help="seconds between page updates while streaming (default 0.2; the browser's "
                             "rendering shares the CPU with the model)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for flag in ("max_input_chars", "max_input_lines", "max_new_tokens", "default_new_tokens"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2

    from pathlib import Path

    from backend.runtime.models import UnknownModel, get_spec

    if args.model and not (Path(args.model).expanduser() / "config.json").is_file():
        try:
            get_spec(args.model)
        except UnknownModel as error:
            print(f"error: {error}", file=sys.stderr)
            return 2

    from app.service import AppConfig, AppService, Limits
    from app.ui import build_ui, launch

    limits = Limits(
        max_input_chars=args.max_input_chars, max_input_lines=args.max_input_lines,
        max_new_tokens=args.max_new_tokens, default_new_tokens=min(args.default_new_tokens, args.max_new_tokens),
    )
    config = AppConfig(model=args.model, db_url=args.db_url, limits=limits, include_random=args.include_random,
                       data_dir=args.data_dir, update_interval_s=max(0.02, args.update_interval))
    service = AppService(config)
    print(f"database: {service.storage.location}", flush=True)
    service.load_model()  # background: the page opens at once and says "loading model…"
    threading.Thread(
        target=lambda: print(f"model {service.wait_until_ready().text}", flush=True), daemon=True
    ).start()
    demo = build_ui(service)
    launch(demo, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
