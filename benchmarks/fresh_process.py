"""One run of a multi-agent benchmark in a fresh process of its own: the script, called as
``python SCRIPT child SPEC``, runs what ``SPEC`` (JSON) describes and prints its report as JSON on
its last line. A fresh process per run keeps one library's imports, threads and Ray out of the
next run's time."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def run_fresh(python: str, script: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The report of ``script``'s run for ``spec`` under the interpreter ``python``. Its stderr (Ray's
    and RLlib's logs) is kept out of the way, and shown, its last 3,000 characters, if the run fails."""
    out = subprocess.run([python, script, "child", json.dumps(spec)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{script} child {spec} failed:\n{out.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report
