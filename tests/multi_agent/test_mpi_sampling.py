"""Multi-agent sampling on the MPI engine (issue 46), under ``mpiexec -n 2`` in gather mode: the
first sample both ranks gather is the local engine's, policy by policy, and training on it leaves
the untrained policy as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")
BIN = Path(sys.executable).parent
MPIEXEC = shutil.which("mpiexec", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
PROGRAM = Path(__file__).with_name("mpi_program.py")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")


def test_two_ranks_sample_each_policy_as_the_local_engine_does(tmp_path: Path):
    import mpi_program

    assert MPIEXEC is not None
    out = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(PROGRAM), str(tmp_path / "mpi.npz")],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    with mpi_program.config("local").build() as local:
        expected = mpi_program.first_sample(local)
    got = np.load(tmp_path / "mpi.npz")
    assert set(got.files) == set(expected)
    assert {key.split("/")[1] for key in expected if key.count("/") == 2} == {"p0", "p1"}
    for rank in ("0", "1"):  # 2 environments x 50 steps each, 4 agents acting until each falls
        env_steps, agent_steps = got[f"{rank}/steps"]
        assert env_steps == 100 and 100 < agent_steps <= 400
        assert got[f"{rank}/p0/rows"][0] > 0 and got[f"{rank}/p1/rows"][0] == 0  # p1 is not trained: no batch
    for key in expected:
        if key.endswith(("/obs", "/actions", "/steps", "/rows")):  # same seeds: same steps, same actions
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
        else:  # network outputs may differ in the last bit between processes
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, atol=1e-6, err_msg=key)
    report = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    assert report["timesteps_total"] == 400 and report["agent_timesteps_total"] > 400
    assert report["policies"] == ["p0", "p1"]
    assert report["moved"]["p0"] > 0 and report["moved"]["p1"] == 0.0
