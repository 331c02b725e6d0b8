"""Hyperparameter sweeps on Ray Tune: a volley algorithm as a Tune ``Trainable``.

Tune does the searching, scheduling and early stopping; this module only makes a
volley run a trial::

    from ray import tune
    from volley.tune import trainable

    tuner = tune.Tuner(trainable("ppo"),
                       param_space={"env": "CartPole-v1", "lr": tune.grid_search([1e-3, 3e-4])},
                       tune_config=tune.TuneConfig(metric="episode_reward_mean", mode="max",
                                                   scheduler=tune.schedulers.ASHAScheduler()),
                       run_config=tune.RunConfig(stop={"training_iteration": 50}))
    best = tuner.fit().get_best_result()

(``tune.RunConfig`` is Ray 2.60's; on Ray 2.9 ``ray.air.RunConfig``, or this module's ``RunConfig``,
which is whichever the Ray installed has.)

``param_space`` holds config keys. Each trial asks for ``num_cpus_for_driver`` CPUs for
itself (default 1, and its learner then runs on that many torch threads) plus
``num_cpus_per_worker`` per Ray rollout worker, as one placement group, so Tune runs
only as many trials at once as the cluster's CPUs hold; the trial's worker actors
are placed inside its group (volley does not start Ray there). ``num_workers="auto"``
means 0 in a trial: it samples in its own process. Each trial's directory gets a
``progress.jsonl`` (``volley plot`` reads it) and volley checkpoints (JSON and
safetensors, never pickle), which ``volley evaluate`` and ``Algorithm.from_checkpoint`` load.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, ClassVar

import ray
from ray import tune
from ray.tune.registry import TRAINABLE_CLASS, _global_registry

from volley.algorithm import Algorithm
from volley.algorithms import ALGORITHMS, RLLIB_NAMES, get_config_class
from volley.callbacks import DefaultCallbacks, classes_named, remember
from volley.config import AlgorithmConfig
from volley.engines.ray_engine import as_trial, ship_by_value, trial_resources
from volley.errors import ConfigError
from volley.logging import ResultLogger
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS, ENVIRONMENTS, FUNCTIONS
from volley.rllib_policies import POLICY_CLASSES

NAMED = {"env": ENVIRONMENTS, "custom_model": CUSTOM_MODELS, "custom_action_dist": CUSTOM_ACTION_DISTS,
         "function": FUNCTIONS, "policy_class": POLICY_CLASSES}
METRIC = "episode_reward_mean"
OBJECTS = "volley-objects-of-"  # the registry key prefix under which a trial finds the user's objects
# Tune's run settings: ray.tune's own classes in Ray 2.60; Ray 2.9 has only ray.air's (ray.train's)
if hasattr(tune, "RunConfig"):
    RunConfig, CheckpointConfig = tune.RunConfig, tune.CheckpointConfig
else:
    from ray.air import CheckpointConfig, RunConfig  # type: ignore[assignment]


class VolleyTrainable(tune.Trainable):
    """A Tune Trainable training one volley algorithm; made by :func:`trainable`."""

    base_config: ClassVar[dict[str, Any]]
    config_class: ClassVar[type[AlgorithmConfig]]
    # the callbacks classes base_config names, and the user's named objects (environment creators,
    # custom model classes) by kind and name: they travel to the trial's process with this class,
    # as a rollout worker's recipe carries them
    callbacks_classes: ClassVar[dict[str, type[DefaultCallbacks]]] = {}
    user_objects: ClassVar[dict[str, dict[str, Any]]] = {}
    algorithm_class: ClassVar[type[Algorithm] | None] = None  # the class given (a user's subclass); else the config's

    @classmethod
    def algorithm_config(cls, params: dict[str, Any]) -> AlgorithmConfig:
        """The base config with a trial's ``params`` (config keys) applied, as a trial runs it."""
        remember(cls.callbacks_classes)
        for kind, objects in cls.user_objects.items():
            for name, user_object in objects.items():
                NAMED[kind].register(name, user_object)
        return as_trial(cls.config_class.from_dict(cls.base_config).update_from_dict(params))

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> tune.PlacementGroupFactory:
        """One bundle for the trial (its learner's ``num_cpus_for_driver`` CPUs, default 1), one per
        Ray rollout worker. Tune asks in the driver as it makes each trial, after the script
        registered its environments and gave its classes: they go to the trial's process from here
        (a name such as ``"PPO"`` was registered before the script defined them)."""
        trial = cls.algorithm_config(config)
        callbacks = classes_named(trial.callbacks_class)
        for callbacks_class in callbacks.values():
            ship_by_value(callbacks_class)
        _global_registry.register(TRAINABLE_CLASS, f"{OBJECTS}{cls.__name__}",
                                  {"named": user_objects_of(trial), "callbacks": callbacks})
        return trial_resources(trial)

    def setup(self, config: dict[str, Any]) -> None:
        key = f"{OBJECTS}{type(self).__name__}"
        if _global_registry.contains(TRAINABLE_CLASS, key):
            given = _global_registry.get(TRAINABLE_CLASS, key)
            remember(given["callbacks"])
            for kind, objects in given["named"].items():
                for name, user_object in objects.items():
                    NAMED[kind].register(name, user_object)
        trial = self.algorithm_config(config)
        self.algo: Algorithm = trial.build() if self.algorithm_class is None else self.algorithm_class(trial)
        self.algo.results_dir = self.trial_dir  # render_env's videos, save()'s checkpoints
        self.logger = ResultLogger(Path(self.trial_dir), tensorboard=False, out=None)

    @property
    def trial_dir(self) -> str:
        """Where Tune keeps this trial's results and checkpoints (its own directory in tests
        that build a Trainable outside Tune)."""
        storage = getattr(self, "_storage", None)
        return storage.trial_fs_path if storage is not None else self.logdir

    def step(self) -> dict[str, Any]:
        result = self.algo.train()
        self.logger.log(result)
        return result

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.algo.save(checkpoint_dir)

    def load_checkpoint(self, checkpoint: str) -> None:  # type: ignore[override]
        self.algo.restore(checkpoint)

    def cleanup(self) -> None:
        self.logger.close()
        self.algo.stop()


def trainable(algo: str | type[Algorithm] | AlgorithmConfig) -> type[VolleyTrainable]:
    """A Trainable class for an algorithm name (``"ppo"``, RLlib's ``"PPO"``), an algorithm class
    (``PPO``) or a config to start from."""
    algorithm_class: type[Algorithm] | None = None
    if isinstance(algo, type):
        algorithm_class, base = algo, algo.get_default_config()
        algo.check_policy_class(base)
        ship_by_value(algo)  # a user's subclass, defined in a script or a test file
    else:
        base = get_config_class(algo)() if isinstance(algo, str) else algo.copy()
    name = f"Volley{type(base).__name__.removesuffix('Config')}"
    callbacks = classes_named(base.callbacks_class)
    user_objects = user_objects_of(base)
    for user_object in callbacks.values():
        ship_by_value(user_object)
    return type(name, (VolleyTrainable,), {"base_config": base.to_dict(), "config_class": type(base),
                                           "callbacks_classes": callbacks, "user_objects": user_objects,
                                           "algorithm_class": algorithm_class})


def user_objects_of(config: AlgorithmConfig) -> dict[str, dict[str, Any]]:
    """The user's named objects by kind: every one registered in this process, and those ``config``
    names (a class given directly); each from a script or test file is marked to go by value."""
    objects = {kind: dict(named.registered) for kind, named in NAMED.items()}
    policies = (config.policies or {}).values()  # a multi-agent run's hand-written policies, models, mapping
    for kind, given in (("env", config.env), ("custom_model", config.model.custom_model),
                        ("custom_action_dist", config.model.custom_action_dist),
                        ("function", config.env_task_fn), ("function", config.custom_evaluation_function),
                        ("function", config.policy_mapping_fn), ("function", config.policies_to_train),
                        ("function", config.observation_fn),
                        *[("policy_class", spec["policy_class"]) for spec in policies],
                        *[("custom_model", (spec["config"].get("model") or {}).get("custom_model")) for spec in policies]):
        found = NAMED[kind].find(given) if isinstance(given, str) else None
        if found is not None:
            objects[kind][str(given)] = found
    for user_object in (o for named in objects.values() for o in named.values()):
        ship_by_value(user_object)  # a script's or test file's module goes to the trial's process by value
    return objects


def register_rllib_names() -> None:
    """volley's algorithms as Tune trainables under RLlib's names (``"PPO"``, ``"DQN"``, ``"APEX"``),
    so ``tune.Tuner("PPO", param_space=config)`` runs as RLlib's docs spell it; and volley's configs
    as a ``param_space`` (Tune takes RLlib's configs through their ``to_dict()``). Done when this
    module is imported, which ``volley`` does as a script that imported Ray takes a config class,
    an algorithm or ``get_trainable_cls`` from it. An algorithm *class* given to Tune becomes its
    :func:`trainable` in :func:`take_algorithm_classes`."""
    for name in ALGORITHMS:
        tune.register_trainable(name.upper(), trainable(name), warn=False)
    for rllib_name, name in RLLIB_NAMES.items():
        tune.register_trainable(rllib_name.upper(), trainable(name), warn=False)
    with contextlib.suppress(ImportError, AttributeError):  # Tune's own test for RLlib's configs
        from ray.tune.tune import _Config

        _Config.register(AlgorithmConfig)


def take_algorithm_classes() -> None:
    """Tune takes a class only where it subclasses ``tune.Trainable``, which volley's algorithms cannot
    (no algorithm imports Ray), yet RLlib's scripts hand Tune the class: ``tune.Tuner(PPO, ...)``,
    ``tune.run(MyPPO, ...)``. Every trainable Tune is given passes through ``register_trainable``
    (``Experiment`` names and registers it there), so that is where a volley algorithm class
    becomes its :func:`trainable`; anything else goes on to Tune's own."""
    import ray.tune.experiment.experiment as experiment
    import ray.tune.registry as registry

    volley_trainable = trainable
    tunes = registry.register_trainable
    if getattr(tunes, "takes_volley_algorithms", False):
        return

    def register_trainable(name: str, trainable: Any, warn: bool = True) -> Any:  # Tune's signature
        if isinstance(trainable, type) and issubclass(trainable, Algorithm):
            trainable = volley_trainable(trainable)
        return tunes(name, trainable, warn)

    register_trainable.takes_volley_algorithms = True  # type: ignore[attr-defined]
    registry.register_trainable = experiment.register_trainable = tune.register_trainable = register_trainable


register_rllib_names()
take_algorithm_classes()
# Tune's registry lives in the Ray session: a later one (ray.shutdown, then ray.init) gets the names
# again through the hook Tune itself re-registers with
ray._private.worker._post_init_hooks.append(register_rllib_names)


def search_space(config_class: type[AlgorithmConfig], grid: list[tuple[str, list[Any]]],
                 uniform: list[tuple[str, list[Any]]], loguniform: list[tuple[str, list[Any]]]
                 ) -> dict[str, Any]:
    """Tune's ``param_space`` from ``--grid KEY=V1,V2`` and ``--uniform/--loguniform KEY=LO,HI``.

    Every key and value is checked against the config class first, so a typo is one
    error naming it (with a did-you-mean), not a sweep of failing trials.
    """
    space: dict[str, Any] = {}
    for flag, pairs in (("grid", grid), ("uniform", uniform), ("loguniform", loguniform)):
        for key, values in pairs:
            if key in space:
                raise ConfigError(f"config key '{key}' is searched twice (--{flag} {key}=...)")
            for value in values:
                config_class().update(**{key: value})
            if flag == "grid":
                space[key] = tune.grid_search(values)
                continue
            if len(values) != 2 or not all(isinstance(v, (int, float)) for v in values) \
                    or not values[0] < values[1] or (flag == "loguniform" and values[0] <= 0):
                raise ConfigError(f"--{flag} {key}= needs two numbers LO,HI with "
                                  f"{'0 < ' if flag == 'loguniform' else ''}LO < HI, got {values!r}")
            space[key] = (tune.uniform if flag == "uniform" else tune.loguniform)(*values)
    return space


def sweep(config: AlgorithmConfig, space: dict[str, Any], *, samples: int,
          stop: Any, storage: Path, name: str, checkpoint_freq: int,
          scheduler: Any = None, callbacks: list[Any] | None = None) -> tune.ResultGrid:
    """Run the trials (``samples`` repeats of the grid) until each meets ``stop``
    (a :class:`volley.run.Stop`); Tune prints the live trial table. ``callbacks``: Tune's
    (its ``WandbLoggerCallback`` for ``volley tune --wandb``)."""
    tuner = tune.Tuner(
        trainable(config), param_space=space,
        tune_config=tune.TuneConfig(metric=METRIC, mode="max", num_samples=samples,
                                    scheduler=scheduler),
        run_config=RunConfig(
            name=name, verbose=1, storage_path=str(storage.absolute()),
            stop=lambda _trial_id, result: stop.reason(result) is not None, callbacks=callbacks,
            checkpoint_config=CheckpointConfig(checkpoint_frequency=checkpoint_freq, checkpoint_at_end=True)))
    return tuner.fit()
