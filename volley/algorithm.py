"""Algorithm: the learner's side of a run: workers, policy, counters, results, checkpoints.

Subclasses (one file each in ``volley/algorithms``) write only what is theirs:
``setup()`` (optimizers), ``postprocess`` (what a worker adds to its batch) and
``training_step()``, which reads like the paper's pseudocode. Everything an
iteration shares (sampling from the workers with the current weights, merging the
observation filter, episode statistics, timing) lives in ``volley.learner``, a module per
role (:class:`volley.learner.loop.Learner` composes them); this module adds the registry of
algorithm classes and what reads it (``named``, ``from_checkpoint``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from volley.checkpoint import check_restorable, read_checkpoint
from volley.config import AlgorithmConfig
from volley.errors import CheckpointError, ConfigError
from volley.learner.loop import Learner
from volley.learner.multi_agent import MultiAgent, is_multi_agent, multi_agent_class
from volley.policies import check_rllib_policy_class
from volley.registry import REGISTRY, algorithm_class, registered_name, unknown_algorithm

# Every algorithm class defined so far, by its class name in lower case ("ppo", "apexdqn"): the
# subclasses that volley.registry does not name (a user's own); filled by __init_subclass__.
_REGISTRY: dict[str, type[Algorithm]] = {}


class Algorithm(Learner):
    """Base of every algorithm; build one with ``SomeConfig(...).build()``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not vars(cls).get("multi_agent"):  # a multi-agent run's class is its algorithm's, named alike
            _REGISTRY[cls.__name__.lower()] = cls

    def __new__(cls, config: AlgorithmConfig | dict[str, Any] | None = None, env: Any = None, *,
                workers: Any = None) -> Algorithm:
        """A run of this algorithm; on a multi-agent environment, or with ``config.multi_agent(policies=...)``,
        a :class:`~volley.learner.multi_agent.MultiAgent` one (still an instance of this class)."""
        cls.check_policy_class(cls.get_default_config() if config is None else config)
        if workers is None and not issubclass(cls, MultiAgent) and is_multi_agent(config, env):
            cls = multi_agent_class(cls)  # type: ignore[assignment]
        return super().__new__(cls)

    @classmethod
    def check_policy_class(cls, config: AlgorithmConfig | dict[str, Any]) -> None:
        """A ConfigError in one line if :meth:`get_default_policy_class` names a policy class volley
        cannot train as it is (its own loss or postprocessing): before a run, or before Tune starts
        a trial of this class (a trial's error would reach the script only as Tune reports it)."""
        policy_class = cls.get_default_policy_class(config)
        if policy_class is not None:
            check_rllib_policy_class(policy_class, cls.config_class.algo_name,
                                     f"{cls.__name__}.get_default_policy_class()")

    @classmethod
    def get_default_policy_class(cls, config: AlgorithmConfig | dict[str, Any]) -> type | None:
        """RLlib's hook naming the policy class an algorithm trains: None, volley's own network. A
        subclass may return RLlib's policy class of its algorithm, or a subclass of it that changes
        none of its methods (:func:`~volley.policies.check_rllib_policy_class`); any other is refused."""
        return None

    @staticmethod
    def named(name: str) -> type[Algorithm]:
        """The algorithm called ``name``, any case: a registered one (:mod:`volley.registry`: an
        ``algo_name`` such as 'ppo', RLlib's 'APEX', a class name as checkpoints record it such as
        'ApexDQN'), else a subclass defined so far, by its config's ``algo_name`` or its class name."""
        if registered_name(name) is not None:
            return cast(type[Algorithm], algorithm_class(name))
        by_algo_name = {cls.config_class.algo_name: cls for cls in _REGISTRY.values() if "config_class" in vars(cls)}
        found = by_algo_name.get(name.lower()) or _REGISTRY.get(name.lower())
        if found is None:
            raise unknown_algorithm(name, [*REGISTRY, *by_algo_name])
        return found

    @classmethod
    def get_default_config(cls) -> AlgorithmConfig:
        """A new config of this algorithm with its defaults (RLlib's classmethod)."""
        return cls.config_class()

    @classmethod
    def default_resource_request(cls, config: AlgorithmConfig | dict[str, Any]) -> Any:
        """What a Ray Tune trial of ``config`` reserves (RLlib's classmethod, for
        ``tune.with_resources(fn, PPO.default_resource_request(config))``): a Tune
        ``PlacementGroupFactory`` of one bundle for the trial and one per Ray rollout worker,
        as ``volley.tune`` reserves. The engines make it: this layer never imports Ray."""
        from volley.engines.ray_engine import as_trial, trial_resources

        if isinstance(config, dict):
            config = cls.config_class.from_dict(config)
        return trial_resources(as_trial(config))

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, to_play: bool = False, **overrides: Any) -> Algorithm:
        """Build the algorithm a checkpoint was saved from (config keys overridable) and restore it;
        with ``to_play``, on the fewest processes that can host it (``AlgorithmConfig.to_play``),
        to play episodes with its policy rather than train on."""
        _, manifest = read_checkpoint(path)
        try:
            algo_cls = cls.named(str(manifest.get("algorithm")))
        except ConfigError as exc:
            raise CheckpointError(f"checkpoint '{path}' cannot be loaded: {exc}") from None
        check_restorable(path, manifest, overrides)
        config = algo_cls.config_class.from_dict(manifest["config"])
        config = config.update(**{**(config.to_play() if to_play else {}), **overrides})
        algo = algo_cls(config)
        try:
            algo.restore(path)
        except BaseException:
            algo.stop()
            raise
        return algo
