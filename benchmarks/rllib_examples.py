"""RLlib 2.9.3's own example scripts run on volley: volley's RLlib compatibility suite (issue 49).

    python benchmarks/rllib_examples.py                 # every script (about 12 minutes on 2 shared cores)
    python benchmarks/rllib_examples.py --fast          # the CI subset (tests/cli/test_rllib_examples.py)
    python benchmarks/rllib_examples.py custom_env cartpole_lstm --write-results
    python benchmarks/rllib_examples.py --python /work/venv29/bin/python --write-results  # under Ray 2.9.3

Nothing of RLlib's is in this repository. ``pip download ray==2.9.3 --no-deps`` fetches the wheel
once into ``~/.cache/volley/rllib-2.9.3`` (``$VOLLEY_CACHE`` moves it); its ``ray/rllib/examples/``
is extracted there. Each script is then changed by one fixed rule, on its import statements only:

    in ``from ray... import a, b as c``, every name that volley exports (``volley.__all__``) is
    imported from ``volley`` instead; every other name, and every ``import ray...``, stays with Ray.

The helper modules the scripts import under their 2.9 names (``ray.rllib.examples.env.*``,
``.models.*``, ``.policy.*``; the Ray installed, 2.60, moved or removed them) are read from the
extracted folder, changed by the same rule as they load (RLlib's ``curriculum_capable_env`` subclasses
``TaskSettableEnv``, which Ray 2.60 removed): a ``sitecustomize`` on the script's ``PYTHONPATH``
makes the 2.9 folder the first place ``ray.rllib.examples`` looks. It also finds what Ray 2.60 moved unchanged under
its 2.9 name (``ray.rllib.utils.deprecation``, ``MOVED``) and gives NumPy 2 back NumPy 1's alias ``np.product``
(``NUMPY_1``), which the 2.9 helpers use. The same hook counts, in every process of the run
(Ray workers and Tune trials included), which ``Algorithm.train`` ran: volley's or RLlib's.

Each script runs in its own process with short stop flags (``--stop-iters 2 --stop-timesteps 2000
--framework torch --num-cpus 8`` where it has them) and a timeout, and is classified: ``ok`` (exit 0, volley's
``Algorithm.train`` ran, RLlib's never did, no Tune trial errored, something printed), ``fail``
(the first root-cause line of the output), ``timeout``, ``ray-2.60`` (it uses what the Ray installed
removed), ``script`` (a bug of the script's own, which fails it on RLlib 2.9 too), or ``n/a`` with the reason.
``--rllib`` runs the scripts unchanged on RLlib itself (``--python``: an environment with
``ray[rllib]==2.9.3``), where ``ok`` means RLlib's ``Algorithm.train`` ran: which scripts RLlib
itself runs under the same flags.

``--python`` runs the scripts (and reads ``volley.__all__``) with another interpreter: this checkout's
volley comes first on its path whatever that interpreter has installed. RESULTS.md keeps one table per
Ray version. The scripts were written for Ray 2.9.3, under which nothing of the above is missing; a
virtual environment with it beside volley, made in the checkout (``ray[rllib]==2.9.3`` pins gymnasium
0.28.1, volley needs gymnasium 1, so RLlib's other dependencies are installed by name; Ray 2.9 imports
``pkg_resources._vendor``, which setuptools 80 no longer has, and was built for NumPy 1)::

    python3.11 -m venv /work/venv29
    /work/venv29/bin/pip install torch==2.13.0 "ray[tune]==2.9.3"
    /work/venv29/bin/pip install "numpy<2" "pandas<2.2" "pyarrow<15" fsspec dm-tree lz4 scikit-image scipy \
        typer rich -e ".[test,tune,mpi,rllib]" pettingzoo
    /work/venv29/bin/pip install "setuptools<70"   # last: torch asks for >=77 (only to build extensions)

and one with RLlib 2.9.3 alone, for ``--rllib`` (RLlib's rock-paper-scissors example needs
PettingZoo 1.23, whose API RLlib 2.9's wrapper reads)::

    python3.11 -m venv /work/venv29rl
    /work/venv29rl/bin/pip install torch==2.13.0 "ray[rllib]==2.9.3" "numpy<2" "pandas<2.2" "pyarrow<15" \
        "setuptools<70" pygame
    /work/venv29rl/bin/pip install --no-deps "pettingzoo==1.23.1"
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import fcntl
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("VOLLEY_CACHE", Path.home() / ".cache" / "volley")) / "rllib-2.9.3"
EXAMPLES = "ray/rllib/examples/"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
LOGS = CACHE / "logs"  # each script's output under the Ray version it ran with, to read a failure in full
SECTION = "## RLlib 2.9.3's example scripts on volley (issue 49)"

# Scripts no volley change can run, each with the reason; the multi-agent ones belong to the
# multi-agent issue and are run and counted apart.
NOT_APPLICABLE = {
    "attention_net_supervised": "TensorFlow only (trains RLlib's TrXLNet with tf.keras)",
    "custom_keras_model": "TensorFlow only (Keras models)",
    "fractional_gpus": "needs a GPU",
    "unity3d_env_local": "needs Unity (ML-Agents)",
    "self_play_with_open_spiel": "needs OpenSpiel (and is multi-agent)",
    "self_play_league_based_with_open_spiel": "needs OpenSpiel (and is multi-agent)",
    "sb2rllib_sb_example": "runs Stable-Baselines3 only",
    "offline_rl": "reads RLlib's offline data (a later issue)",
    "saving_experiences": "writes RLlib's offline data (a later issue)",
    "custom_input_api": "reads RLlib's offline data (a later issue)",
    "custom_model_loss_and_metrics": "reads RLlib's offline data for its imitation loss (a later issue)",
    "custom_model_api": "TensorFlow only (calls tf1.enable_eager_execution() whatever the framework)",
    "parametric_actions_cartpole_embeddings_learnt_by_model": "TensorFlow only (--framework tf or tf2)",
    "action_masking": "RLlib's new API stack (a custom RLModule), which volley does not implement",
    "compute_adapted_gae_on_postprocess_trajectory": "a module defining a callbacks class: it runs nothing",
    "complex_struct_space": "builds a Tuner and never calls fit(): it trains nothing on RLlib 2.9 either "
                            "(whose PPO would refuse its train_batch_size=2 < sgd_minibatch_size=128 too)",
    "multi_agent_independent_learning": "needs PettingZoo's waterworld_v4, which PettingZoo 1.27 (installed) removed",
    "multi_agent_parameter_sharing": "trains APEX_DDPG (Ape-X DDPG, which volley does not have and Ray 2.60 "
                                     "removed) on PettingZoo's waterworld_v4, which PettingZoo 1.27 removed",
    "two_trainer_workflow": "its Algorithm subclass's training_step is written with RLlib's execution internals "
                            "(synchronous_parallel_sample, train_one_step, MultiAgentReplayBuffer, MultiAgentBatch)",
}
MULTI_AGENT = {
    "centralized_critic", "centralized_critic_2", "hierarchical_training", "multi_agent_cartpole",
    "multi_agent_custom_policy", "multi_agent_different_spaces_for_agents",
    "multi_agent_independent_learning", "multi_agent_parameter_sharing", "multi_agent_two_trainers",
    "restore_1_of_n_agents_from_checkpoint", "rock_paper_scissors_multiagent", "two_step_game",
    "two_trainer_workflow",
}
# The scripts that finish in seconds each: CI runs them (tests/cli/test_rllib_examples.py). The multi-agent
# ones: PPO and DQN each training its own policy; a learned policy (feed-forward, then LSTM) against RLlib's
# hand-written rock-paper-scissors heuristics on PettingZoo; agents that come and go, spaces from PolicySpecs.
# custom_env and parallel_evaluation_and_training are left to the whole suite: CI runs their Tune calls
# (a config holding a grid search, tune.run with a dict, an environment class defined in the script) in one
# process instead (test_tunes_rllib_names_run_volley_with_a_config_or_a_dict), 75 s less of its tests
FAST = ("cartpole_lstm", "nested_action_spaces", "checkpoint_by_custom_criteria", "deterministic_training",
        "multi_agent_two_trainers", "rock_paper_scissors_multiagent", "hierarchical_training")
# Flags that stop a script early, where the script has them, and the arguments of those that
# spell it otherwise. --num-cpus counts Ray's logical CPUs: 8 lets a trial that reserves four
# rollout workers (replay_buffer_api) or evaluation workers beside itself start on a 2-core machine,
# as it would on RLlib's test machines
STOP_FLAGS = {"--stop-iters": "2", "--stop-timesteps": "2000", "--framework": "torch", "--num-cpus": "8"}
EXTRA_ARGS = {"custom_experiment": ["--train-iterations", "2"]}

# What Ray 2.60 (installed) removed that a 2.9 script uses: such a run fails whatever library trains
RAY_260 = {
    "local_mode` is no longer supported": "Ray 2.60 removed ray.init(local_mode=True)",
    "cannot import name 'Logger' from 'ray.tune.logger'": "Ray 2.60 removed ray.tune.logger.Logger",
    "RunConfig(local_dir)` argument is deprecated": "Ray 2.60 removed RunConfig(local_dir=...)",
    "cannot import name 'SingleAgentRLModuleSpec'": "Ray 2.60 renamed SingleAgentRLModuleSpec",
}
# Modules the 2.9 helpers import that Ray 2.60 moved, unchanged, elsewhere: found under their 2.9 names
# (RLlib 2.9's env/multi_agent.py, which most multi-agent scripts import, decorates with ``Deprecated``)
MOVED = {"ray.rllib.utils.deprecation": "ray._common.deprecation"}
# What NumPy 2 (installed; RLlib 2.9 ran on NumPy 1) removed that the 2.9 helpers call: NumPy 1's alias
# of a function it kept (models/shared_weights_model.py and batch_norm_model.py size layers with np.product)
NUMPY_1 = {"product": "prod"}
# A script's own bug, which fails it on RLlib 2.9.3 as well (``--rllib`` runs it there): the line of
# its output that shows it
SCRIPT_OWN = {
    "callbacks=[LegacyLoggerCallback(MyPrintLogger)]":
        "it gives Tune LegacyLoggerCallback(MyPrintLogger), one class where Ray 2.9.3's Tune takes a list of "
        "them, before any trial starts (RLlib 2.9.3 itself fails the same way)",
    "URI has empty scheme: 'saved_models'":
        "its RunConfig(local_dir='saved_models') is a relative path, which Ray 2.9.3's Tune refuses before "
        "any trial starts (RLlib 2.9.3 itself fails the same way)",
}
# A script that relies on one of RLlib's default values, which volley's defaults are not
# (docs/rllib.md): it fails on volley, and the line says what the script would have to set
RLLIB_DEFAULTS = {
    'np.log10(train_results["episode_reward_mean"])':
        "its curriculum_fn takes log10 of episode_reward_mean, 0 when no episode of an iteration reached "
        "FrozenLake's goal (about 1 random-walk episode in 100 does); RLlib's default PPO batch of 4,000 steps "
        "(about 260 episodes; means of 0.011 to 0.032 with seeds 0 to 3) seldom sees none, volley's 2,048 steps "
        "(about 120 episodes) saw none with seed 0; it runs with .training(train_batch_size=4000)",
}
# The status a failure gets when its output shows one of these, the first that matches
KNOWN_CAUSES = (("script", SCRIPT_OWN), ("fail", RLLIB_DEFAULTS), ("ray-2.60", RAY_260))

# Runs first in every Python process of a script's run (Ray's workers and Tune's trials too): the
# 2.9 helper modules, and a line per Algorithm.train call naming whose class it was.
SITECUSTOMIZE = '''
import importlib.abc, importlib.machinery, os, sys
import numpy
from benchmarks.rllib_examples import MOVED, NUMPY_1, rewrite
for _old, _new in NUMPY_1.items():
    if not hasattr(numpy, _old):  # NumPy 2
        setattr(numpy, _old, getattr(numpy, _new))
_TREE = os.environ["VOLLEY_SUITE_TREE"]
_NAMES = set(os.environ["VOLLEY_SUITE_NAMES"].split())
_LOG = os.environ["VOLLEY_SUITE_LOG"]
_WATCH = {"volley.algorithm": "volley", "ray.rllib.algorithms.algorithm": "rllib"}

def _counted(train, owner):
    def train_counted(self, *args, **kwargs):
        with open(_LOG, "a") as log:
            log.write(owner + " " + type(self).__name__ + "\\n")
        return train(self, *args, **kwargs)
    return train_counted

class _Loader(importlib.abc.Loader):
    def __init__(self, loader, owner):
        self.loader, self.owner = loader, owner
    def create_module(self, spec):
        return self.loader.create_module(spec)
    def exec_module(self, module):
        self.loader.exec_module(module)
        module.Algorithm.train = _counted(module.Algorithm.train, self.owner)

class _Moved(importlib.abc.Loader):
    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])
    def exec_module(self, module):
        pass

class _Rewritten(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):  # never cached: the rule's names change with volley
        return compile(rewrite(self.get_data(self.path).decode(), _NAMES), self.path, "exec", dont_inherit=True)

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in MOVED and importlib.machinery.PathFinder.find_spec(name, path) is None:  # Ray 2.60
            return importlib.machinery.ModuleSpec(name, _Moved())
        if name.startswith("ray.rllib.examples."):
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and str(spec.origin).startswith(_TREE) and spec.origin.endswith(".py"):
                spec.loader = _Rewritten(name, spec.origin)
            return spec
        if name == "ray.rllib.examples":
            here = os.path.join(_TREE, "ray", "rllib", "examples")
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            places = [here] + (list(spec.submodule_search_locations) if spec else [])
            return importlib.util.spec_from_file_location(
                name, os.path.join(here, "__init__.py"), submodule_search_locations=places)
        if name in _WATCH:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None:
                spec.loader = _Loader(spec.loader, _WATCH[name])
            return spec
        return None

import importlib.util
sys.meta_path.insert(0, _Finder())
'''


@dataclasses.dataclass
class Row:
    script: str
    kind: str  # "single-agent", "multi-agent", or "n/a"
    status: str  # "ok", "fail", "timeout", "n/a"
    detail: str
    seconds: float = 0.0


def fetch() -> Path:
    """The extracted 2.9.3 tree (``ray/rllib/examples`` inside it), downloading the wheel once."""
    tree = CACHE / "tree"
    if (tree / EXAMPLES / "__init__.py").is_file():
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    # one process downloads and extracts at a time (the test suite's workers may all ask at once);
    # the others wait, then find the tree
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / EXAMPLES / "__init__.py").is_file():
            return tree
        wheels = sorted(CACHE.glob("ray-2.9.3-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "ray==2.9.3", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "-d", str(CACHE),
                            "--quiet"], check=True)
            wheels = sorted(CACHE.glob("ray-2.9.3-*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = [n for n in wheel.namelist() if n.startswith(EXAMPLES)]
            wheel.extractall(tree, [n for n in names if not n.endswith("/__init__.py")])
            wheel.extractall(tree, [n for n in names if n.endswith("/__init__.py")])  # last: the "done" mark
    return tree


def volley_names(python: str = sys.executable) -> set[str]:
    """The names the rule takes from volley: those the package exports, and its algorithm modules
    (as ``algorithms.ppo``)."""
    code = ("import pkgutil, volley, volley.algorithms as a; print(*volley.__all__, "
            "*('algorithms.' + m.name for m in pkgutil.iter_modules(a.__path__)))")
    return set(_ask(python, code).split())


@functools.cache
def ray_version(python: str = sys.executable) -> str:
    """The version of the Ray that ``python`` imports."""
    return _ask(python, "import ray; print(ray.__version__)").strip()


def _ask(python: str, code: str) -> str:
    out = subprocess.run([python, "-c", code], capture_output=True, text=True,
                         env=child_env(Path(), Path(), Path()))
    if out.returncode != 0:
        raise SystemExit(f"{python} -c {code!r} failed: {root_cause(out.stderr)}")
    return out.stdout


def _spelled(aliases: list[ast.alias]) -> str:
    return ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)


def rewrite(source: str, exported: set[str]) -> str:
    """The script with the rule applied to its imports from Ray (nothing else changes)."""
    lines = source.splitlines(keepends=True)
    for node in sorted(ast.walk(ast.parse(source)), key=lambda n: getattr(n, "lineno", 0), reverse=True):
        text = None
        indent = lines[node.lineno - 1][: node.col_offset] if isinstance(node, (ast.Import, ast.ImportFrom)) else ""
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (f"{node.module}.").startswith("ray."):
            home = "volley.algorithms" if node.module == "ray.rllib.algorithms" else "volley"
            ours = [a for a in node.names if (f"algorithms.{a.name}" if home != "volley" else a.name) in exported]
            theirs = [a for a in node.names if a not in ours]
            if ours:
                text = f"{indent}from {home} import {_spelled(ours)}\n"
                text += f"{indent}from {node.module} import {_spelled(theirs)}\n" if theirs else ""
        elif isinstance(node, ast.Import) and len(node.names) == 1 and node.names[0].asname:
            module = node.names[0].name.removeprefix("ray.rllib.")
            if module != node.names[0].name and module in exported:  # import ray.rllib.algorithms.ppo as ppo
                text = f"{indent}import volley.{module} as {node.names[0].asname}\n"
        if text is not None:
            lines[node.lineno - 1: node.end_lineno] = [text]
    return "".join(lines)


def child_env(site: Path, tree: Path, log: Path) -> dict[str, str]:
    """The script's environment: this checkout's volley first, then the hook."""
    path = [str(REPO), str(site), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "VOLLEY_SUITE_TREE": str(tree),
            "VOLLEY_SUITE_LOG": str(log), "PYTHONUNBUFFERED": "1", "RAY_DEDUP_LOGS": "0",
            "RAY_ADDRESS": "local",  # a cluster of its own, never another one running on this machine
            # Ray 2.60's own switch back to the Train API of 2.9, under which a Tune function may call
            # ray.train.report and ray.train.get_context (custom_experiment, custom_train_fn) as 2.9 scripts do
            "RAY_TRAIN_V2_ENABLED": "0",
            # 8 logical CPUs however the script starts Ray, as --num-cpus gives those that have the flag
            "RAY_OVERRIDE_RESOURCES": '{"CPU": 8}'}


def arguments(name: str, source: str) -> list[str]:
    """The script's own flags that stop it early."""
    args = [item for flag, value in STOP_FLAGS.items() if f'"{flag}"' in source for item in (flag, value)]
    return args + EXTRA_ARGS.get(name, [])


NAMES = {"volley": "volley", "rllib": "RLlib"}
WRAPPERS = re.compile(r"^(ray\.\S*(RayTaskError|RayActorError|TuneError)|\S*TuneError|ray\.exceptions\.)")


def root_cause(output: str) -> str:
    """The first exception line that is not one of Ray's wrappers around another."""
    found = [line.strip() for line in output.splitlines()
             if re.match(r"^[\w.]+(Error|Exception|Warning|Interrupt|Exit|NotFound)(\(\w+\))?:? ", line)
             or re.match(r"^[\w.]+(Error|Exception)$", line)]
    inner = [line for line in found if not WRAPPERS.match(line)]
    picked = (inner or found or [line for line in output.splitlines() if line.strip()][-1:] or ["(no output)"])[0]
    return picked[:300]


def classify(name: str, kind: str, code: int | None, out: str, err: str, trains: list[str], seconds: float,
             library: str = "volley") -> Row:
    """One run as a row of the table (``code`` None: it ran past its timeout); ``library`` is the one
    whose ``Algorithm.train`` must have run (``"rllib"``: the scripts unchanged, on RLlib itself)."""
    if code is None:
        return Row(name, kind, "timeout", f"no exit after {seconds:.0f} s", seconds)
    owners = {line.split()[0] for line in trains}
    errored = re.search(r"Number of errored trials: ([1-9]\d*)|Trials did not complete|ERROR\s+\|", out + err)
    if code != 0 or errored:
        cause = root_cause(err + out)
        known = [(status, why) for status, causes in KNOWN_CAUSES for sign, why in causes.items() if sign in out + err]
        status, why = known[0] if known else ("fail", "")
        return Row(name, kind, status, f"{why}: {cause}" if why else cause, seconds)
    other, shown = ("rllib", "volley") if library == "volley" else ("volley", "rllib")
    if other in owners:
        return Row(name, kind, "fail", f"{NAMES[other]}'s Algorithm.train ran, not {NAMES[shown]}'s", seconds)
    if shown not in owners:
        return Row(name, kind, "fail", f"{NAMES[shown]}'s Algorithm.train never ran", seconds)
    if not out.strip():
        return Row(name, kind, "fail", "exited 0 but printed nothing", seconds)
    return Row(name, kind, "ok", f"{len(trains)} {NAMES[shown]} train() calls", seconds)


def run(name: str, tree: Path, exported: set[str], timeout: float, python: str = sys.executable,
        library: str = "volley", named: bool = False) -> Row:
    """Run one script, rewritten, in its own process (and process group) under its stop flags, with
    the interpreter ``python`` (``library="rllib"``: unchanged, ``exported`` empty, on RLlib itself,
    where a script volley counts as not applicable runs too if it is ``named``)."""
    kind = "n/a" if name in NOT_APPLICABLE else "multi-agent" if name in MULTI_AGENT else "single-agent"
    if name in NOT_APPLICABLE and not (library == "rllib" and named):  # RLlib itself on one named: run it
        return Row(name, kind, "n/a", NOT_APPLICABLE[name])
    source = (tree / EXAMPLES / f"{name}.py").read_text()
    with tempfile.TemporaryDirectory(prefix=f"rllib-{name}-") as work:
        site, log, script = Path(work) / "site", Path(work) / "trains.log", Path(work) / f"{name}.py"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        script.write_text(rewrite(source, exported))
        log.touch()
        start = time.monotonic()
        process = subprocess.Popen([python, str(script), *arguments(name, source)], cwd=work,
                                   env={**child_env(site, tree, log), "HOME": work,
                                        "VOLLEY_SUITE_NAMES": " ".join(sorted(exported))}, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        code: int | None
        try:
            out, err = process.communicate(timeout=timeout)
            code = process.returncode
        except subprocess.TimeoutExpired:
            code = None
        finally:
            end_processes(f"VOLLEY_SUITE_LOG={log}")  # the script and Ray's processes it left behind
        if code is None:
            out, err = process.communicate()
        logs = LOGS / f"{'rllib' if library == 'rllib' else 'ray'}-{ray_version(python)}"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{name}.log").write_text(f"{out}\n--- stderr ---\n{err}")
        return classify(name, kind, code, out, err, log.read_text().splitlines(), time.monotonic() - start,
                        library)


def end_processes(marker: str) -> None:
    """Kill every process whose environment holds ``marker`` (this run's own: Ray's daemons leave
    the script's process group, and a cluster left running would be joined by the next script)."""
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if marker.encode() in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)


def table(rows: list[Row]) -> str:
    """The results as a Markdown table, with the counts per kind above it."""
    counts = []
    for kind in ("single-agent", "multi-agent"):
        mine = [r for r in rows if r.kind == kind]
        if mine:
            ok = sum(r.status == "ok" for r in mine)
            counts.append(f"{kind}: **{ok} of {len(mine)} ok**")
    skipped = sum(r.kind == "n/a" for r in rows)
    lines = ["; ".join(counts) + f"; not applicable: {skipped}.", "",
             "| script | kind | result | detail | s |", "| --- | --- | --- | --- | ---: |"]
    shown = {ord("|"): "/", ord("<"): "&lt;", ord(">"): "&gt;"}  # a cell, not a column or an HTML tag
    lines += [f"| {r.script} | {r.kind} | {r.status} | {r.detail.translate(shown)} | {r.seconds:.0f} |"
              for r in rows]
    return "\n".join(lines)


def merged(rows: list[Row], ray: str, library: str = "volley") -> list[Row]:
    """``rows`` with the rows RESULTS.md holds under Ray ``ray`` for the scripts not run now (a run of
    a few scripts updates their rows only), in the order of the scripts' names."""
    earlier = {}
    for line in _tables(RESULTS.read_text())[2].get(_subsection(ray, library), "").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1] in ("single-agent", "multi-agent", "n/a"):
            earlier[cells[0]] = Row(cells[0], cells[1], cells[2], cells[3], float(cells[4]))
    return sorted({**earlier, **{row.script: row for row in rows}}.values(), key=lambda row: row.script)


def _subsection(ray: str, library: str = "volley") -> str:
    return f"### Under Ray {ray}" if library == "volley" else f"### RLlib {ray} itself (the scripts unchanged)"


def _tables(results: str) -> tuple[int, int, dict[str, str]]:
    """Where this suite's section of ``results`` starts and ends, and its tables by subsection title."""
    start = results.find(SECTION)
    if start == -1:
        return len(results), len(results), {}
    end = results.find("\n## ", start + len(SECTION))
    end = len(results) if end == -1 else end + 1
    found = re.findall(r"^(### (?:Under Ray \S+|RLlib \S+ itself[^\n]*))\n(.*?)(?=^### |\Z)", results[start:end], re.MULTILINE | re.DOTALL)
    return start, end, dict(found)


def write_results(text: str, ray: str, python: str, library: str = "volley") -> None:
    """Put ``text``, the table of a run under Ray ``ray``, into RESULTS.md's section for this suite,
    in place of an earlier run's under the same version (another version's table stays)."""
    command = "python benchmarks/rllib_examples.py --write-results"
    command += f" --python {python}" if python != sys.executable else ""
    command += " --rllib" if library == "rllib" else ""
    results = RESULTS.read_text()
    start, end, tables = _tables(results)
    tables[_subsection(ray, library)] = f"\nMeasured with `{command}`.\n\n{text}\n\n"
    intro = (f"{SECTION}\n\nStop flags `--stop-iters 2 --stop-timesteps 2000`; the seconds are wall time "
             "on a shared 2-core machine, a guide only. `ok`: volley's `Algorithm.train` ran (RLlib's never "
             "did), exit 0, no Tune trial errored; `ray-2.60`: the script uses what Ray 2.60 removed, so it "
             "fails there whatever library trains; `script`: a bug of the script's own fails it, on RLlib "
             "2.9.3 itself too (the table `RLlib 2.9.3 itself`: the scripts unchanged, with `--rllib`, where `ok` "
             "means RLlib's `Algorithm.train` ran). Under Ray 2.60, what it moved unchanged and NumPy 1's `np.product` are found under their "
             "2.9 names. The scripts were written for Ray 2.9.3; how to make an environment with it beside "
             "volley: the docstring of `benchmarks/rllib_examples.py`.\n\n")
    by_version = sorted(tables.items(), key=lambda item: ([int(n) for n in re.findall(r"\d+", item[0])], "itself" in item[0]))
    section = intro + "".join(f"{title}\n{body}" for title, body in by_version)
    after = "\n" + results[end:] if end < len(results) else ""
    RESULTS.write_text(results[:start].rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n" + after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scripts", nargs="*", help="script names (without .py); default: all")
    parser.add_argument("--fast", action="store_true", help="only the CI subset")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per script")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs the scripts (another Ray: its virtual environment's)")
    parser.add_argument("--write-results", action="store_true", help="write the table into benchmarks/RESULTS.md")
    parser.add_argument("--rllib", action="store_true",
                        help="run the scripts unchanged on RLlib itself (--python: an environment with ray[rllib]==2.9.3)")
    args = parser.parse_args(argv)
    tree = fetch()
    every = sorted(p.stem for p in (tree / EXAMPLES).glob("*.py") if p.stem != "__init__")
    names = list(FAST) if args.fast else args.scripts or every
    unknown = sorted(set(names) - set(every))
    if unknown:
        parser.error(f"no RLlib 2.9.3 example named {unknown[0]!r}")
    library = "rllib" if args.rllib else "volley"
    exported, ray = (set() if args.rllib else volley_names(args.python)), ray_version(args.python)
    print(f"Ray {ray} ({args.python})", flush=True)
    rows = []
    for name in names:
        rows.append(run(name, tree, exported, args.timeout, args.python, library, named=bool(args.scripts)))
        row = rows[-1]
        print(f"{row.script:50s} {row.status:8s} {row.seconds:5.0f} s  {row.detail}", flush=True)
    print(table(rows))
    if args.write_results:
        write_results(table(merged(rows, ray, library)), ray, args.python, library)
    return 0 if all(r.status in ("ok", "n/a") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
