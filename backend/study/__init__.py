"""The study, reproduced on the user's machine: `python -m backend study`.

One command runs every measurement of the copy-as-decode study on every corpus and writes
`results.json` (every number, with the machine and versions), plotly figures (HTML, PNG where a
Chrome is available to kaleido) and `report.md` (published figures beside ours).

Modules: `runner` (the stages, producing the results document), `figures` (plots drawn from that
document only), `report` (report.md drawn from that document only), `machine` (what ran it),
`published` (the study's figures, quoted).
"""

from backend.study.runner import STAGES, StudyConfig, run_study

__all__ = ["STAGES", "StudyConfig", "run_study"]
