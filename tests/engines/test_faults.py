"""Faults volley survives (issue 6): dead Ray workers, environments that raise or return NaN,
and (issue 14) replacements that never reuse a seed, workers on machines with another CPU count.
Each fault is real: a killed actor, a process that exits, an environment that raises. (A
removed node: tests/engines/test_cluster.py.)

The actor manager's own rules (restart limits, replacement slots) are tested on the in-process
backend (``in_process``: the Ray engine's groups with their actors in this process, a death at a
known call); Ray's backend keeps the tests of what only processes show (a kill, an exit, errors
crossing the process boundary) and the contract both backends share."""

from __future__ import annotations

import contextlib
import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import EnvError, PPOConfig, register_env
from volley.config import RolloutPlan
from volley.engines.actor_manager import ActorManager, CallsInFlight, RestartPolicy
from volley.engines.backends import ActorBackend, ActorDied, InProcessBackend
from volley.engines.ray_engine import RayBackend, ship_by_value
from volley.errors import ConfigError, WorkerError


class Faulty(gym.Env):
    """Observes its step count in the episode; reward 1 a step; ``length``-step episodes.

    The instance whose first reset has seed ``fail_seed`` (the run's seed 0 plus its global
    env index; a recreated one is seeded otherwise), or every instance with ``fail_all``,
    fails once, as ``fail`` says, at its
    ``fail_at``-th step overall: "step" raises, "reset" raises in its second reset instead,
    "nan_reward" and "nan_obs" return a NaN, "exit" ends its process (after creating the
    file ``marker``, so the replacement worker's instance does not).
    """

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict) -> None:
        self.config = config
        self.length = config.get("length", 10)
        self.total = self.resets = 0
        self.failing = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.resets == 0:
            self.failing = self.config.get("fail_all") or seed == self.config.get("fail_seed")
        self.resets += 1
        if self.failing and self.config["fail"] == "reset" and self.resets == 2:
            raise RuntimeError("reset failed on purpose")
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        obs, reward = np.array([float(self.t)], np.float32), 1.0
        if self.failing and self.total == self.config.get("fail_at"):
            fail = self.config["fail"]
            if fail == "step":
                raise RuntimeError(f"step {self.total} failed on purpose")
            if fail == "nan_reward":
                reward = math.nan
            if fail == "nan_obs":
                obs[0] = np.nan
            if fail == "exit" and not os.path.exists(self.config["marker"]):
                open(self.config["marker"], "w").close()
                os._exit(1)
        return obs, reward, self.t >= self.length, False, {}


register_env("faulty", lambda cfg: Faulty(cfg))


def faulty(engine: str = "local", **env_config) -> PPOConfig:
    """2 workers x 3 envs; env 4 (worker 1, env index 1) fails as ``env_config`` says."""
    return (PPOConfig().environment("faulty", env_config={"fail_seed": 4, **env_config})
            .resources(engine=engine).rollouts(num_workers=2, num_envs_per_worker=3)
            .training(train_batch_size=120, minibatch_size=30, num_epochs=1).debugging(seed=0))


def assert_train_raises(algo, error: type[Exception], match: str, iterations: int = 3) -> None:
    """Train up to ``iterations`` times expecting ``error`` matching ``match``; stop ``algo``."""
    try:
        with pytest.raises(error, match=match):
            for _ in range(iterations):
                algo.train()
    finally:
        algo.stop()


# -- environments that raise or return NaN -------------------------------------------------


@pytest.mark.parametrize("fail", ["step", "reset", "nan_reward", "nan_obs"])
def test_failed_env_is_recreated_and_its_episode_dropped(fail):
    algo = faulty(fail=fail, fail_at=15).rollouts(batch_mode="complete_episodes").build()
    try:
        batch = algo.sample()  # env 4 fails in its second episode (or its reset)
        # whole 10-step episodes only: the failed one's first steps never reach the batch
        assert len(batch) % 10 == 0
        np.testing.assert_array_equal(batch["obs"][:, 0], np.tile(np.arange(10), len(batch) // 10))
        result = algo.train()
        assert result["num_env_errors"] == 1
        assert result["episode_reward_min"] == result["episode_reward_max"] == 10.0
        assert result["timesteps_this_iter"] >= 120
    finally:
        algo.stop()


@pytest.mark.parametrize(("fail", "message"), [
    ("step", r"raised at step 5 of its episode: RuntimeError: step 15 failed on purpose"),
    ("reset", r"raised in reset: RuntimeError: reset failed on purpose"),
    ("nan_reward", r"returned a non-finite reward \(nan\) at step 5 of its episode"),
    ("nan_obs", r"returned a non-finite observation at step 5 of its episode"),
])
def test_env_errors_raise_names_env_worker_index_and_cause(fail, message):
    algo = faulty(fail=fail, fail_at=15).fault_tolerance(env_errors="raise").build()
    assert_train_raises(algo, EnvError, r"environment 'faulty' \(worker 1, env index 1\) " + message)


def test_env_failing_after_every_recreation_stops_the_run():
    assert_train_raises(faulty(fail="step", fail_at=1, fail_all=True).build(), EnvError,
                        r"\(worker 0, env index 0\) raised at step 1 of its episode: RuntimeError: "
                        r"step 1 failed on purpose; it failed 3 times in a row")


class FaultyVector(gym.vector.VectorEnv):
    """A native vector env (its sub-environments are not Python objects): every env observes
    its step count and ends after 10 steps (NEXT_STEP autoreset). The instance first reset
    with seed 0 raises at its ``fail_at``-th step."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, fail_at: int = 15) -> None:
        self.num_envs, self.fail_at = num_envs, fail_at
        self.single_observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.steps = 0
        self.failing: bool | None = None

    def reset(self, *, seed=None, options=None):
        if self.failing is None:
            self.failing = seed == 0
        self.t = np.zeros(self.num_envs)
        return self.t[:, None].astype(np.float32), {}

    def step(self, actions):
        self.steps += 1
        if self.failing and self.steps == self.fail_at:
            raise RuntimeError("the vector failed on purpose")
        self.t = np.where(self.t >= 10, 0, self.t + 1)
        done = self.t >= 10
        return self.t[:, None].astype(np.float32), np.ones(self.num_envs), done, np.zeros_like(done), {}


gym.register("volley-test/FaultyVector-v0", entry_point=lambda: Faulty({}), vector_entry_point=FaultyVector)


def test_native_vector_env_is_recreated_whole():
    config = (PPOConfig().environment("volley-test/FaultyVector-v0").resources(engine="local")
              .rollouts(num_workers=0, num_envs_per_worker=3, batch_mode="complete_episodes")
              .training(train_batch_size=60, minibatch_size=30, num_epochs=1))
    algo = config.build()
    try:
        result = algo.train()  # the vector fails at its step 15: every env is mid-episode
        assert result["num_env_errors"] == 1
        assert result["episode_reward_min"] == result["episode_reward_max"] == 10.0
    finally:
        algo.stop()
    assert_train_raises(config.fault_tolerance(env_errors="raise").build(), EnvError,
                        r"env index unknown: a native vector env cannot say which of its 3\) raised at "
                        r"step 4 of its episode: RuntimeError: the vector failed on purpose")


def test_env_error_on_a_ray_worker_names_the_worker(ray_session):
    algo = faulty("ray", fail="nan_obs", fail_at=15).fault_tolerance(env_errors="raise").build()
    assert_train_raises(algo, EnvError, r"environment 'faulty' \(worker 1, env index 1\) returned a "
                                        r"non-finite observation at step 5")


# -- dead workers ---------------------------------------------------------------------------


def test_killed_worker_is_replaced_and_samples_with_the_current_weights(in_process):
    algo = (PPOConfig().environment("CartPole-v1", observation_filter="MeanStdFilter")
            .resources(engine="ray").rollouts(num_workers=2, num_envs_per_worker=2)
            .training(train_batch_size=200, minibatch_size=50, num_epochs=2).build())
    try:
        algo.train()  # the learner's weights now differ from any freshly built worker's
        in_process.kill(algo.workers.actors[1])
        batch = algo.sample()
        assert algo.workers.num_restarts == 1
        with torch.no_grad():
            dist, _ = algo.policy(torch.as_tensor(batch["obs"]))
            logp = dist.log_prob(torch.as_tensor(batch["actions"])).numpy()
        np.testing.assert_allclose(batch["logp"], logp, rtol=1e-5, atol=1e-5)
        assert len(batch) > 180  # both workers' fragments: 200 less the reset steps
        result = algo.train()
        assert result["num_worker_restarts"] == 1
    finally:
        algo.stop()


# Valid steps per worker and fragment of 20 steps x 3 envs of 10-step episodes: a fresh
# worker's first fragment has one reset step per env (19 x 3 = 57), the next two (18 x 3 = 54).
@pytest.mark.parametrize(("mode", "first", "second"), [("resample", 57 + 57, 54 + 54),
                                                       ("use_others", 57, 54 + 57)])
def test_worker_process_exiting_mid_sample_is_replaced(ray_session, tmp_path, mode, first, second):
    config = faulty("ray", fail="exit", fail_at=5, marker=str(tmp_path / "exited"))
    algo = config.fault_tolerance(on_worker_failure=mode).build()
    try:
        result = algo.train()  # worker 1's process exits at its env 1's fifth step
        assert (tmp_path / "exited").exists()
        assert result["num_worker_restarts"] == 1
        assert result["timesteps_this_iter"] == first
        assert algo.train()["timesteps_this_iter"] == second
    finally:
        algo.stop()


def test_worker_deaths_past_max_worker_restarts_stop_the_run(in_process):
    algo = faulty("ray", fail="none").fault_tolerance(max_worker_restarts=1).build()
    in_process.kill(algo.workers.actors[0])
    assert algo.train()["num_worker_restarts"] == 1
    in_process.kill(algo.workers.actors[0])
    assert_train_raises(algo, WorkerError, r"rollout worker 0 died .*not replaced: max_worker_restarts=1 "
                                           r"replacements were made already")


def test_no_restarts_when_restart_failed_workers_is_off(in_process):
    algo = faulty("ray", fail="none").fault_tolerance(restart_failed_env_runners=False).build()
    in_process.kill(algo.workers.actors[1])
    assert_train_raises(algo, WorkerError, r"rollout worker 1 died .*restart_failed_workers=False")


def test_a_worker_dying_mid_iteration_is_resampled_or_left_out_exactly(in_process):
    """The in-process twin of the process-exit test: worker 1 dies as it starts its first sample
    call (after its construction), so the first iteration's steps are known exactly."""
    for mode, first, second in (("resample", 57 + 57, 54 + 54), ("use_others", 57, 54 + 57)):
        algo = faulty("ray", fail="none").fault_tolerance(on_worker_failure=mode).build()
        try:
            in_process.crash(algo.workers.actors[1], after_calls=0)
            result = algo.train()
            assert (result["num_worker_restarts"], result["timesteps_this_iter"]) == (1, first), mode
            assert algo.train()["timesteps_this_iter"] == second, mode
        finally:
            algo.stop()


class SeedEcho(gym.Env):
    """Observes the seed of its first reset, forever (its episodes never end), so a batch shows
    the seeds of the environments that sampled it."""

    observation_space = gym.spaces.Box(0, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.seed_seen = seed
        return np.array([self.seed_seen], np.float32), {}

    def step(self, action):
        return np.array([self.seed_seen], np.float32), 0.0, False, False, {}


register_env("seed-echo", lambda cfg: SeedEcho())


def test_replaced_workers_never_share_an_environment_seed(in_process):
    algo = (PPOConfig().environment("seed-echo").resources(engine="ray")
            .rollouts(num_workers=2, num_envs_per_worker=2)
            .training(train_batch_size=8, minibatch_size=4, num_epochs=1).debugging(seed=0).build())

    def seeds_by_worker() -> list[set[int]]:
        obs = algo.sample()["obs"][:, 0]  # worker 0's 2 envs x 2 steps, then worker 1's
        return [set(part.astype(int).tolist()) for part in np.split(obs, 2)]

    try:
        assert seeds_by_worker() == [{0, 1}, {2, 3}]
        seen = []
        for victim in (0, 1, 0):  # each replacement takes the next 2 seeds, never a used one
            in_process.kill(algo.workers.actors[victim])
            seen.append(seeds_by_worker())
        assert seen == [[{4, 5}, {2, 3}], [{4, 5}, {6, 7}], [{8, 9}, {6, 7}]]
        assert algo.workers.num_restarts == 3
    finally:
        algo.stop()


def test_a_worker_seeing_another_cpu_count_samples_the_planned_fragment(ray_session, monkeypatch):
    """num_workers='auto' and the fragment length are resolved by the driver (2 CPUs here): a
    worker whose machine reports 64 CPUs still takes the planned 50 steps per environment."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    driver = os.getpid()

    def on_a_bigger_machine(cfg: dict) -> gym.Env:
        if os.getpid() != driver:  # the driver calls a creator once too, to see if it is multi-agent
            os.cpu_count = lambda: 64  # in the worker's process, where the environment is made
        return gym.wrappers.TransformObservation(  # observes the CPU count its process reports
            SeedEcho(), lambda obs: np.array([os.cpu_count()], np.float32), SeedEcho.observation_space)

    register_env("seed-echo-64-cpus", on_a_bigger_machine)
    algo = (PPOConfig().environment("seed-echo-64-cpus").resources(engine="ray")
            .rollouts(num_envs_per_worker=2).training(train_batch_size=200, minibatch_size=50, num_epochs=1)
            .build())
    try:
        assert algo.workers.plan == RolloutPlan(num_workers=2, num_envs_per_worker=2, fragment_length=50)
        batch = algo.sample()
        assert set(batch["obs"][:, 0].tolist()) == {64.0}  # the workers' processes do report 64
        assert len(batch) == 200  # 2 workers x 2 envs x 50 steps (64 CPUs would have made it 2 x 2 x 2)
    finally:
        algo.stop()


# -- the backends' contract, on each -----------------------------------------------------------------


class Counter:
    """A hosted object: counts its calls, fails on demand, says which slot built it."""

    def __init__(self, slot: int) -> None:
        self.slot, self.calls = slot, 0

    def tick(self) -> tuple[int, int]:
        self.calls += 1
        return self.slot, self.calls

    def fail(self, what: str) -> None:
        raise ConfigError(what) if what == "config" else ValueError(f"bad value {what!r}")

    def ping(self) -> None:
        pass


def kill(backend: ActorBackend, actor) -> None:
    """Kill ``actor`` and wait until it answers no more (Ray's kill lands soon, not at once)."""
    backend.kill(actor)
    with contextlib.suppress(ActorDied):
        while True:
            backend.get(backend.call(actor, "ping"))


def counters(backend: ActorBackend) -> ActorManager:
    """Two counters, replaced at most twice."""
    return ActorManager("counter", lambda index, slot: (Counter, (slot,)), 2, RestartPolicy(True, 2), backend,
                        num_cpus=0)


@pytest.fixture(params=["in-process", "ray"])
def backend(request) -> ActorBackend:
    if request.param == "ray":
        request.getfixturevalue("ray_session")
        ship_by_value(Counter)  # this test module is not importable in Ray's workers
        return RayBackend()
    return InProcessBackend()


def test_a_backend_reports_errors_deaths_and_replacements_alike(backend):
    manager = counters(backend)
    try:
        assert manager.foreach("tick") == [(0, 1), (1, 1)]
        with pytest.raises(WorkerError, match=r"^counter 1 failed: ValueError: bad value 'x'$"):
            manager.get(1, manager.call(1, "fail", "x"))
        with pytest.raises(ConfigError, match=r"^config$"):  # a VolleyError stays itself
            manager.get(0, manager.call(0, "fail", "config"))
        victim = manager.actors[1]
        kill(backend, victim)
        # the dead actor is replaced in a new slot (2) and called again; the other keeps counting
        assert manager.foreach("tick") == [(0, 2), (2, 1)]
        assert manager.actors[1] is not victim and (manager.num_restarts, manager.num_created) == (1, 3)
        kill(backend, manager.actors[0])
        assert manager.foreach("tick", again=False) == [(2, 2)]  # use_others: the replacement not called
        assert manager.foreach("tick") == [(3, 1), (2, 3)]
        kill(backend, manager.actors[0])
        with pytest.raises(WorkerError, match=r"^counter 0 died \(.+\); not replaced: max_worker_restarts=2 "):
            manager.foreach("tick")
    finally:
        manager.stop()


def test_calls_in_flight_on_a_dead_actor_are_dropped_and_counted():
    """Two calls in flight per actor; actor 0 dies as it starts its second: both it held then are
    dropped, its replacement gets two new ones, and results keep coming from both."""
    backend = InProcessBackend()
    manager = counters(backend)
    calls = CallsInFlight(manager, depth=2)
    backend.crash(manager.actors[0], after_calls=1)
    taken: list[tuple[int, tuple[int, int]]] = []
    while len(taken) < 6:
        calls.top_up(lambda index: manager.call(index, "tick"), lambda: True)
        taken += calls.ready(timeout=1.0)
    # oldest call first: 0's first; 0 dies at its second (its third, made meanwhile, dies too);
    # 1's first two (made before the replacement's), the replacement's two, 1's third
    assert taken == [(0, (0, 1)), (1, (1, 1)), (1, (1, 2)), (0, (2, 1)), (0, (2, 2)), (1, (1, 3))]
    assert (calls.num_dropped, manager.num_restarts) == (2, 1)
