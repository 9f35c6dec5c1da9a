"""Command line: `python -m backend COMMAND ...`. Each module here registers its own commands."""
