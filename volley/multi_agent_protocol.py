"""How volley reads any multi-agent environment, never through one base class: by RLlib's
``MultiAgentEnv`` protocol.

An environment is volley's :class:`~volley.multi_agent_env.MultiAgentEnv`, RLlib's own (recognised
by its base class's name, so that Ray is never imported) or a PettingZoo game wrapped as one; the
rest of volley recognises and makes one (:func:`is_multi_agent_env`,
:func:`make_multi_agent_env`), lists its agents (:func:`possible_agent_ids`), resolves each agent's
spaces from the four forms RLlib declares them in, old API and new (:func:`agent_spaces`), and
checks what its ``reset`` and ``step`` return (:func:`checked_output`) through the functions here.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Container
from typing import Any, Literal

import gymnasium as gym

from volley.envs import registered_creator
from volley.errors import ConfigError, EnvError, VolleyError, shown

# The modules whose class ``MultiAgentEnv`` marks an environment as multi-agent: volley's, and
# RLlib's, which are only ever read by name so that nothing here imports Ray (nor volley's class)
_BASE_MODULES = frozenset({"volley.multi_agent_env", "ray.rllib.env.multi_agent_env"})
_PETTINGZOO_BASES = frozenset({"pettingzoo.utils.env"})  # where AECEnv and ParallelEnv live

SpaceKind = Literal["observation", "action"]


def _has_base_class(cls: type, names: tuple[str, ...], modules: Container[str]) -> bool:
    return any(base.__name__ in names and base.__module__ in modules for base in cls.__mro__)


def is_multi_agent_env(obj: Any) -> bool:
    """Whether ``obj`` (an environment, or its class) is a multi-agent environment: volley's
    :class:`~volley.multi_agent_env.MultiAgentEnv` (the PettingZoo wrappers included) or RLlib's
    own, found by name in the class's bases, so that Ray is never imported."""
    cls = obj if isinstance(obj, type) else type(obj)
    return _has_base_class(cls, ("MultiAgentEnv",), _BASE_MODULES)


def make_multi_agent_env(env: str, env_config: dict, creator: Callable[[dict], Any] | None,
                         render_mode: str | None = None) -> Any:
    """One multi-agent environment of what a config's ``env`` names: ``creator(env_config)`` (a
    function given to ``register_env`` or an environment class; without one, the creator
    registered as ``env``). A ConfigError names ``env`` when it is not a multi-agent environment.
    ``render_mode`` goes to a class that takes one, as Gymnasium's do (``make_multi_agent``'s
    classes); a creator function chooses its own.
    """
    creator = creator or registered_creator(env)
    if creator is None:
        raise ConfigError(f"environment '{env}' is not a multi-agent environment: multi-agent training "
                          f"needs a MultiAgentEnv (for copies of one Gymnasium environment: "
                          f"register_env('{env}', make_multi_agent('{env}')))")
    render = {"render_mode": render_mode} if render_mode is not None and _takes_render_mode(creator) else {}
    try:
        made = creator(copy.copy(env_config), **render)  # an EnvContext stays one
    except VolleyError:
        raise
    except Exception as exc:  # the user's creator: name it, keep the cause for Python users
        raise EnvError(f"the creator of environment '{env}' failed with env_config {shown(env_config)}: "
                       f"{type(exc).__name__}: {exc}") from exc
    if not is_multi_agent_env(made):
        raise ConfigError(f"environment '{env}' is not a multi-agent environment: its creator returned "
                          f"{type(made).__name__} {shown(made)}{_wrapping_hint(made)}")
    return made


def _takes_render_mode(creator: Callable[..., Any]) -> bool:
    """Whether ``creator`` is an environment class whose ``__init__`` takes ``render_mode``."""
    return isinstance(creator, type) and "render_mode" in inspect.signature(creator).parameters


def _wrapping_hint(made: Any) -> str:
    """What wraps a PettingZoo environment (given unwrapped, a common slip), else nothing."""
    if _has_base_class(type(made), ("AECEnv",), _PETTINGZOO_BASES):
        return "; a PettingZoo AEC environment enters wrapped: PettingZooEnv(env)"
    if _has_base_class(type(made), ("ParallelEnv",), _PETTINGZOO_BASES):
        return "; a PettingZoo parallel environment enters wrapped: ParallelPettingZooEnv(env)"
    return ""


def possible_agent_ids(env: Any) -> list[Any]:
    """Every agent id ``env`` declares: its own ``get_agent_ids()`` where it overrides RLlib's,
    else ``_agent_ids`` (RLlib's old API), else ``possible_agents`` (its new one); [] if none.
    A set comes sorted (where its ids compare), so every process lists the agents alike."""
    override = _overridden(env, "get_agent_ids")
    ids = override() if override is not None else (getattr(env, "_agent_ids", None)
                                                    or getattr(env, "possible_agents", None) or [])
    if isinstance(ids, list | tuple):
        return list(ids)
    try:
        return sorted(ids)
    except TypeError:  # ids of mixed types
        return sorted(ids, key=repr)


def agent_spaces(env: Any, agent_id: Any) -> tuple[gym.Space, gym.Space]:
    """Agent ``agent_id``'s observation and action spaces in ``env`` (see :func:`agent_space`)."""
    return agent_space(env, "observation", agent_id), agent_space(env, "action", agent_id)


def agent_space(env: Any, kind: SpaceKind, agent_id: Any) -> gym.Space:
    """Agent ``agent_id``'s ``kind`` ("observation" or "action") space, from the first of:
    ``get_<kind>_space(agent_id)`` where the environment's class defines its own (RLlib's new
    API); the ``<kind>_spaces`` dict; a ``<kind>_space`` that is a Dict keyed by agent id (RLlib's
    "preferred format"); the one ``<kind>_space`` of every agent. An EnvError names the agent and
    the environment's class when it has none."""
    override = _overridden(env, f"get_{kind}_space")
    if override is None:
        return declared_space(env, kind, agent_id)
    try:
        space = override(agent_id)
    except (KeyError, IndexError) as exc:
        raise EnvError(f"agent {agent_id!r} has no {kind} space in {type(env).__name__}: its "
                       f"get_{kind}_space({agent_id!r}) raised {type(exc).__name__}: {exc}") from None
    if not isinstance(space, gym.Space):
        raise EnvError(f"agent {agent_id!r} has no {kind} space in {type(env).__name__}: its "
                       f"get_{kind}_space({agent_id!r}) returned {shown(space)}")
    return space


def declared_space(env: Any, kind: SpaceKind, agent_id: Any) -> gym.Space:
    """:func:`agent_space` from the environment's attributes (every form but the override)."""
    per_agent = getattr(env, f"{kind}_spaces", None)
    space = getattr(env, f"{kind}_space", None)
    if per_agent is not None:
        found, where = per_agent.get(agent_id), f"{kind}_spaces holds agents {list(per_agent)!r}"
    elif isinstance(space, gym.spaces.Dict) and _keyed_by_agent(env, kind, space, agent_id):
        found, where = space.spaces.get(agent_id), f"{kind}_space is a Dict of agents {list(space.spaces)!r}"
    else:
        found, where = space, f"{kind}_space is {shown(space)}"
    if not isinstance(found, gym.Space):
        raise EnvError(f"agent {agent_id!r} has no {kind} space in {type(env).__name__}: {where}")
    return found


def _keyed_by_agent(env: Any, kind: SpaceKind, space: gym.spaces.Dict, agent_id: Any) -> bool:
    """Whether ``space`` is a Dict keyed by agent id rather than one Dict space of every agent.

    RLlib's scripts may say so (``_obs_space_in_preferred_format``); else a Dict whose keys hold
    every declared agent, or, where none is declared, ``agent_id``, is keyed by agent.
    """
    said = getattr(env, "_obs_space_in_preferred_format" if kind == "observation"
                   else "_action_space_in_preferred_format", None)
    if said is not None:
        return bool(said)
    declared = possible_agent_ids(env)
    return set(declared or [agent_id]) <= set(space.spaces)


def _overridden(env: Any, method: str) -> Callable[..., Any] | None:
    """``env``'s ``method`` where its class defines one of its own, not RLlib's or volley's base one."""
    for cls in type(env).__mro__:
        if method in vars(cls):
            return None if cls.__name__ == "MultiAgentEnv" else getattr(env, method)
    return None


_FIELDS = {"reset": ("observations", "infos"),
           "step": ("observations", "rewards", "terminateds", "truncateds", "infos")}


def checked_output(env: Any, method: Literal["reset", "step"], output: Any,
                   known_agents: Container[Any] | None = frozenset()) -> tuple[dict[Any, Any], ...]:
    """``output`` of ``env.reset()`` or ``env.step()``, after checking that it is what a multi-agent
    environment returns: a tuple of dicts keyed by agent id; ``terminateds`` and ``truncateds``
    with ``"__all__"``; an observation for at least one agent while the episode goes on (or no
    agent could act); a space for each agent that observes (looked up for agents not in
    ``known_agents``: a worker passes those whose spaces it holds, None when it holds every
    agent's). Otherwise one line of EnvError that names the environment's class and the value."""
    fields = _FIELDS[method]
    where = f"{type(env).__name__}.{method}()"
    if not isinstance(output, tuple | list) or len(output) != len(fields):
        raise EnvError(f"{where} returned {shown(output)}: a multi-agent environment returns "
                       f"({', '.join(fields)}), each a dict keyed by agent id")
    for field, value in zip(fields, output, strict=True):
        if not isinstance(value, dict):
            raise EnvError(f"{where} returned {field} {shown(value)}, not a dict keyed by agent id")
    obs = output[0]
    ended = False
    if method == "step":
        for field, flags in zip(fields[2:4], output[2:4], strict=True):
            if "__all__" not in flags:
                raise EnvError(f"{where} returned {field} {shown(flags)} without '__all__' (whether the "
                               "episode has ended for every agent)")
        ended = bool(output[2]["__all__"] or output[3]["__all__"])
    if not obs and not ended:
        raise EnvError(f"{where} returned no observation ({shown(tuple(output))}) and the episode goes on: "
                       "no agent could act next")
    unknown = [] if known_agents is None else [agent for agent in obs if agent not in known_agents]
    for agent in unknown:
        try:
            agent_space(env, "observation", agent)
        except EnvError as exc:
            raise EnvError(f"{where} returned an observation for agent {agent!r}, but {exc}") from None
    return tuple(output)
