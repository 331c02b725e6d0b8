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
    python benchmarks/custom_model_acting.py --env CartPole-v1 --example   # and the Dict-observation example's model
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from volley.bench import rate, rates_table, sampling_worker

EXAMPLE = Path(__file__).parents[1] / "examples" / "custom_model_dict_obs.py"
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


def print_example(rounds: int, seconds: float) -> None:
    """examples/custom_model_dict_obs.py's model (a Dict observation, an encoder per part): its
    acting step traced against its torch forward step, on 1 and 16 rows."""
    import importlib.util

    from volley import PPOConfig
    from volley.catalog import build_policy
    from volley.rollout.worker import EnvStreams

    spec = importlib.util.spec_from_file_location("custom_model_dict_obs", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    env = example.DictCartPole()
    pre, policy = build_policy(env.observation_space, env.action_space,
                               PPOConfig().training(model={"custom_model": example.DictObsModel}).model)
    policy.eval()
    torch_act = policy._torch_twin().act
    micros: dict[str, list[float]] = {}
    for rows in (1, 16):
        streams = EnvStreams(0, range(rows))
        obs = pre({"cart": np.zeros((rows, 2), np.float32), "pole": np.ones((rows, 2), np.float32),
                   "last_action": np.zeros(rows, np.int64)}, rows)
        for name, step in {f"{rows} row(s), traced step": lambda o=obs, s=streams: policy.act(o, [], s, True),
                           f"{rows} row(s), torch forward step": lambda o=obs, s=streams: torch_act(
                               o, [], s, True, None)}.items():
            micros[name] = [1e6 / rate(step, 1, seconds) for _ in range(rounds)]
    print("\n| DictObsModel (examples/custom_model_dict_obs.py) | µs (each round) | median |\n| --- | --- | --- |")
    for name, values in micros.items():
        print(f"| {name} | {', '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", action="append", choices=list(CASES))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--example", action="store_true", help="also the Dict-observation example's model")
    args = parser.parse_args()
    for env in args.env or list(CASES):
        compare(env, args.rounds, args.seconds)
    if args.example:
        print_example(args.rounds, args.seconds / 2)


if __name__ == "__main__":
    main()
