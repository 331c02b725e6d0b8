"""A custom model against volley's built-in MLP, side by side and in turns: one PPO rollout worker's
sampling rate with each (as ``volley bench sampler --custom-model`` measures them, but
interleaved for ``--rounds`` rounds, so that a busy machine's swings reach both alike), and
where an acting step's time goes: the built-in MLP's step in numpy, the custom model's step
as the worker takes it (traced into numpy where it traces, :mod:`volley.traced`) and the same
model's step through its torch forward pass.

The custom model is RLlib's ``FullyConnectedNetwork`` with the built-in MLP's keys (64x64 tanh,
a value tower of its own): the same layers. Run on an older commit, the worker's step is the
torch one (the "before" of RESULTS).

    python benchmarks/custom_model_acting.py                     # CartPole x16, Pong-RAM, HalfCheetah
    python benchmarks/custom_model_acting.py --env CartPole-v1 --rounds 3 --seconds 2
    python benchmarks/custom_model_acting.py --examples --rounds 5 --seconds 2   # the example models alone
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from volley.bench import rate, rates_table, sampling_worker

CASES = {"CartPole-v1": 16, "ALE/Pong-ram-v5": 1, "HalfCheetah-v5": 1}


def compare(env: str, rounds: int, seconds: float) -> None:
    """Print ``env``'s two tables: sampling rates, and acting steps' µs."""
    built_in, custom = (sampling_worker(env, CASES[env], {}, variant) for variant in ("", "custom model"))
    for worker, weights, _ in (built_in, custom):
        worker.sample(weights, None)  # the weights loaded, observations to act on
    obs = [w.obs_filter(w.observations, update=False) for w, _, _ in (built_in, custom)]
    torch_act = custom[0].policy._torch_twin().act
    steps_of = {"built-in MLP, worker's step": lambda: built_in[0].act(obs[0], True),
                "custom model, worker's step": lambda: custom[0].act(obs[1], True),
                "custom model, torch forward step": lambda: torch_act(obs[1], [], custom[0].streams, True, None)}
    rates: dict[str, list[float]] = {"built-in MLP (numpy)": [], "custom model": []}
    micros: dict[str, list[float]] = {name: [] for name in steps_of}
    for _ in range(rounds):
        for name, (worker, weights, steps) in zip(rates, (built_in, custom), strict=True):
            rates[name].append(rate(lambda w=worker, x=weights: w.sample(x, None), steps, seconds))
        for name, step in steps_of.items():
            micros[name].append(1e6 / rate(step, 1, seconds / 2))
    print(f"\n{env}, {CASES[env]} environment(s), {rounds} rounds of {seconds:g} s\n")
    print(rates_table(rates, "policy"))
    print("\n| acting step | µs (each round) | median |\n| --- | --- | --- |")
    for name, values in micros.items():
        print(f"| {name} | {', '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f} |")
    if hasattr(custom[0].policy, "traced"):  # this commit's code: the torch step's parts too
        print_parts(custom[0], obs[1], rounds, seconds / 2)
    for worker, _, _ in (built_in, custom):
        worker.env.close()


def print_parts(worker: Any, obs: np.ndarray, rounds: int, seconds: float) -> None:
    """Where a custom model's acting step goes, in µs: torch's arithmetic alone (its layers on a
    tensor), the ModelV2 call around it (``input_dict``, the restored observation, the shape
    checks), the step as it was (``no_grad``, numpy in and out, the draw) and as it is
    (``inference_mode``), and the traced program alone and with its draw."""
    import torch

    policy, head = worker.policy, worker.policy.numpy_head()
    model, tensor = policy.model, torch.as_tensor(obs)
    program = next(p for p in policy.traced.programs.values() if p is not None)
    run = program.load([w.detach().numpy() for w in policy.parameters()])

    def layers() -> None:
        with torch.inference_mode():
            model._logits(model._hidden_layers(tensor))
            model._value_branch(model._value_branch_separate(tensor))

    def outputs() -> None:
        with torch.inference_mode():
            policy.outputs(tensor)

    def step_no_grad() -> None:  # the torch step before this commit
        with torch.no_grad():
            dist_inputs, values, _ = policy.outputs(torch.as_tensor(obs))
        head.draw(dist_inputs.numpy(), worker.streams, True), values.numpy()

    torch_act = policy._torch_twin().act
    parts = {"torch: the layers alone": layers, "torch: policy.outputs (the ModelV2 call)": outputs,
             "torch step under no_grad (before)": step_no_grad,
             "torch step under inference_mode (after)": lambda: torch_act(obs, [], worker.streams, True, None),
             "traced numpy program alone": lambda: run(obs),
             "traced step (program, draw, weight check)": lambda: worker.act(obs, True)}
    micros: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(rounds):
        for name, part in parts.items():
            micros[name].append(1e6 / rate(part, 1, seconds))
    print("\n| custom model's step, part | µs (each round) | median |\n| --- | --- | --- |")
    for name, values in micros.items():
        print(f"| {name} | {', '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f} |")


def example_policies() -> dict[str, tuple[Any, Any, Callable[..., Any], Any]]:
    """The example models the compatibility suite runs, each its policy, observation preprocessor,
    the acting step in torch alone (its forward pass, and a custom distribution's own
    ``sample()`` in torch) and the observation space: RLlib's Dict-observation example, the parametric-actions (action-mask)
    model, the recurrent example (an LSTM), and the autoregressive example (a custom distribution
    that calls the model between its two draws)."""
    import sys

    import gymnasium as gym
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    import action_spaces
    import custom_models

    from volley import PPOConfig
    from volley.catalog import build_policy
    from volley.distributions import custom_head

    torch.set_num_threads(1)  # as in every worker
    dict_obs = custom_models.load_example()
    cases = {"Dict observation (DictObsModel)": (
                 dict_obs.DictCartPole().observation_space, dict_obs.DictCartPole().action_space,
                 {"custom_model": dict_obs.DictObsModel}),
             "parametric actions, masked (ParametricActionsModel)": (
                 *custom_models.parametric_spaces(), {"custom_model": custom_models.ParametricActionsModel}),
             "recurrent (TorchRNNModel, an LSTM)": (
                 gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2),
                 {"custom_model": custom_models.TorchRNNModel}),
             "autoregressive actions (a custom action dist)": (
                 action_spaces.CorrelatedActions({}).observation_space, action_spaces.CorrelatedActions({}).action_space,
                 {"custom_model": "autoregressive_model", "custom_action_dist": "binary_autoreg_dist"})}
    policies = {}
    for name, (obs_space, action_space, keys) in cases.items():
        torch.manual_seed(0)
        pre, policy = build_policy(obs_space, action_space, PPOConfig().training(model=keys).model)
        policy.eval()
        if policy.traced_dist is not None:  # the torch step draws with the distribution's own sample()
            policy.numpy_head = lambda p=policy: custom_head(p.custom_dist, p.model, p.layout, torch.device("cpu"))
        torch_act = policy._torch_twin().act
        vars(policy).pop("numpy_head", None)
        policies[name] = (policy, pre, torch_act, obs_space)
    return policies


def print_examples(rounds: int, seconds: float) -> None:
    """The example models' acting steps, traced (as workers act) against torch alone, on 1 and 16
    rows, all interleaved in each round; acting rates are rows over the median step's time, and
    torch / traced the median of each round's ratio."""
    from volley.rollout.worker import EnvStreams

    policies = example_policies()
    steps: dict[tuple[str, int, str], Callable[[], Any]] = {}
    for name, (policy, pre, torch_act, space) in policies.items():
        for rows in (1, 16):
            obs, state = example_batch(policy, pre, rows, space)
            streams = EnvStreams(0, range(rows))
            steps[name, rows, "traced"] = lambda p=policy, o=obs, s=state, r=streams: p.act(o, s, r, True)
            steps[name, rows, "torch"] = lambda a=torch_act, o=obs, s=state, r=streams: a(o, s, r, True, None)
            steps[name, rows, "traced"]()  # traced here, outside the timing
    micros: dict[tuple[str, int, str], list[float]] = {key: [] for key in steps}
    for round_ in range(rounds):
        for name, rows, kind in steps:  # a model's two steps one after the other, swapped every other round
            key = (name, rows, {"traced": "torch", "torch": "traced"}[kind] if round_ % 2 else kind)
            micros[key].append(1e6 / rate(steps[key], 1, seconds))
    print("\n| example model | rows | traced µs (each round) | torch µs (each round) | traced acting steps/s "
          "| torch acting steps/s | torch / traced (median of the rounds') |\n| --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in dict.fromkeys((name, rows) for name, rows, _ in steps):
        traced, in_torch = micros[name, rows, "traced"], micros[name, rows, "torch"]
        t, u = statistics.median(traced), statistics.median(in_torch)
        ratio = statistics.median(b / a for a, b in zip(traced, in_torch, strict=True))  # each round's, side by side
        print(f"| {name} | {rows} | {', '.join(f'{v:.1f}' for v in traced)} | {', '.join(f'{v:.1f}' for v in in_torch)} "
              f"| {rows * 1e6 / t:,.0f} | {rows * 1e6 / u:,.0f} | {ratio:.2f} |")


def example_batch(policy: Any, pre: Any, rows: int, space: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """``rows`` observations of the example's space (an action mask's entries 0 or 1, the first
    always allowed), and its initial state for each row."""
    space.seed(0)
    samples = [space.sample() for _ in range(rows)]
    for sample in samples if isinstance(samples[0], dict) and "action_mask" in samples[0] else []:
        sample["action_mask"] = np.round(sample["action_mask"])
        sample["action_mask"][0] = 1.0
    obs = pre({k: np.stack([s[k] for s in samples]) for k in samples[0]} if isinstance(samples[0], dict)
              else np.stack(samples), rows)
    if obs.dtype.kind == "f":  # unbounded Boxes sample up to float32's maximum
        np.clip(obs, -10.0, 10.0, out=obs)
    return obs, [np.repeat(s[None], rows, 0) for s in policy.initial_state()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", action="append", choices=list(CASES))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", action="store_true",
                        help="the example models' acting steps, traced against torch (alone, without --env)")
    args = parser.parse_args()
    for env in args.env or ([] if args.examples else list(CASES)):
        compare(env, args.rounds, args.seconds)
    if args.examples:
        print_examples(args.rounds, args.seconds / 2)


if __name__ == "__main__":
    main()
