"""The study, reproduced on the user's machine: `python -m backend study`.

One command runs every measurement of the copy-as-decode study on every corpus and writes
`results.json` (every number, with the machine and versions), plotly figures (HTML, PNG where a
Chrome is available to kaleido) and `report.md` (published figures beside ours).

Modules: `config` (StudyConfig, stage names), `context` (the state the stages share), `stages/`
(one module per stage, each filling its section), `runner` (runs them in order, writes the outputs),
`figures` (plots drawn from the results document only), `report` (report.md drawn from it only),
`published` (the study's figures, quoted). The numbers come from backend.measure.
"""

from backend.study.config import STAGES, StudyConfig
from backend.study.runner import run_study

__all__ = ["STAGES", "StudyConfig", "run_study"]
