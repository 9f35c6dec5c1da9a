"""`python -m backend COMMAND ...`: the command line of copy-as-decode.

Each module in COMMAND_MODULES exposes `register(subparsers)`, adding its commands with
`set_defaults(handler=fn)`; `fn(args)` does the work and prints via backend.cli.common.emit.
Modules are imported lazily so `python -m backend resolve ...` never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from backend.cli.common import UsageError

COMMAND_MODULES = (
    "backend.cli.core_commands",     # program, resolve, roundtrip, ceiling, perturb, probe
    "backend.cli.runtime_commands",  # bench-kernel, mask-cost
    "backend.cli.edit_commands",     # edit, replay
    "backend.cli.study_command",     # study
    "backend.cli.train_commands",    # make-data, train, evaluate
    "backend.cli.bench_command",     # bench
    "backend.cli.serve_command",     # serve-llamacpp
    "backend.cli.snippet_command",   # apply-snippet
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints usage + exits 2; keep it one line
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m backend", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name == name:  # that command group is not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
