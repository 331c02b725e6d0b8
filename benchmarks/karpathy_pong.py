"""Karpathy's "Pong from Pixels" policy gradient, and volley's pg-pong beside it (issue 37).

``--library reference`` is a single-process numpy implementation of the algorithm as
"Deep Reinforcement Learning: Pong from Pixels" (karpathy.github.io, 2016) and the
script it links describe it, written here from that description:

- preprocessing: crop rows 35..194, keep every second row and column of the red channel
  (80x80), erase the two background colours (144, 109), set everything else to 1; the
  input is the difference of consecutive frames (zeros on an episode's first step);
- a 2-layer network without biases: 200 ReLU units, ``W1 ~ N(0, 1/6400)``,
  ``W2 ~ N(0, 1/200)``, a sigmoid giving P(UP); ALE actions UP = 2, DOWN = 3;
- the gradient of ``log π`` at the logit is ``y - p`` (y = 1 for UP), times the discounted
  return (γ 0.99) restarted at every point scored, standardised over each episode (as the
  script does; ``--standardize batch`` standardises over the batch of 10 instead), backed
  through the network by hand and *summed* over the steps of a batch of 10 episodes;
- RMSProp ascent: ``v ← 0.99·v + 0.01·g²``, ``θ ← θ + 1e-4 · g / (√v + 1e-5)``.

It computes in float32 (the script's numpy used float64: the precision is no part of the
recipe, and float32 halves the memory read by the forward pass of every step).

``--library volley`` trains volley's ``pg-pong`` preset on the local engine with the
preset's 2 workers, stepped serially in this process (so the learning per episode is the
preset's, and the process can be paused with SIGSTOP); ``--engine ray`` runs the 2 workers
as Ray actors, as the preset does, to compare speed with the reference on a quiet machine.
``--network post`` swaps the preset's network (a row per action, biases) for the post's,
given to volley as a custom model (:func:`register_post_network`): the algorithm is then
volley's and the network the post's, so per episode the two should learn alike.

Two environments (``--env-variant``): ``v5`` is ``ALE/Pong-v5`` as registered (4 frames
per action, sticky actions with probability 0.25); ``2016`` is gym's ``Pong-v0`` of 2016,
which the post trained on: each action repeated for 2, 3 or 4 frames drawn uniformly,
no sticky actions, the minimal action set.

Both write one JSON line per episode to ``--out``: ``episode``, ``reward``,
``running_reward`` (0.99·previous + 0.01·this episode's, as the post prints),
``env_steps`` and ``frames`` (cumulative; frames null for volley, whose workers report
steps) and ``wall_s`` (cumulative over restarts).
A run resumes from its own saved state (``--out`` with ``.state.npz`` for the reference,
a ``.ckpt`` directory for volley), saved after every update::

    python benchmarks/karpathy_pong.py --library reference --env-variant 2016 --seed 0 \\
        --episodes 3000 --out /work/runs/pong/ref-2016-s0.jsonl
    python benchmarks/karpathy_pong.py --library volley --env-variant 2016 --seed 0 \\
        --episodes 3000 --out /work/runs/pong/volley-2016-s0.jsonl
    python benchmarks/karpathy_pong.py --report /work/runs/pong --png benchmarks/karpathy_pong.png
    python benchmarks/karpathy_pong.py --check    # the same first update from the same episodes
    python benchmarks/karpathy_pong.py --check --network post --env-variant v5
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN, PIXELS = 200, 80 * 80
UP, DOWN = 2, 3
BACKGROUND = (144, 109)
# env_config on top of ALE/Pong-v5 (JSON-friendly: a list frameskip is ale-py's [low, high))
ENV_VARIANTS: dict[str, dict[str, Any]] = {
    "v5": {},
    "2016": {"frameskip": [2, 5], "repeat_action_probability": 0.0, "full_action_space": False},
}


class EpisodeLog:
    """The JSON-lines log. A resumed run starts from the line of the last episode its saved state
    learned from (every line is written before the state that follows it is saved): the
    running reward and the cumulative counters go on from there, later lines are dropped."""

    def __init__(self, path: Path, episode: int) -> None:
        self.path = path
        self.episode, self.running, self.env_steps, self.frames, self.wall_s = 0, None, 0, 0, 0.0
        rows = [json.loads(line) for line in (path.read_text().splitlines() if path.exists() else []) if line]
        rows = rows[:episode]
        if episode:
            if len(rows) < episode:
                raise SystemExit(f"{path} has {len(rows)} episodes, the saved state {episode}")
            last = rows[-1]
            self.episode, self.running, self.env_steps = episode, last["running_reward"], last["env_steps"]
            self.frames, self.wall_s = last["frames"] or 0, last["wall_s"]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        self.started = time.perf_counter() - self.wall_s

    def add(self, reward: float, steps: int, frames: int | None) -> None:
        """Log an episode; ``frames`` None where they are not known (volley reports steps)."""
        self.episode += 1
        self.running = reward if self.running is None else 0.99 * self.running + 0.01 * reward
        self.env_steps += steps
        self.frames += frames or 0
        self.wall_s = time.perf_counter() - self.started
        with self.path.open("a") as f:
            f.write(json.dumps({"episode": self.episode, "reward": reward,
                                "running_reward": round(self.running, 4), "env_steps": self.env_steps,
                                "frames": self.frames if frames is not None else None,
                                "wall_s": round(self.wall_s, 2)}) + "\n")


# -- the reference --------------------------------------------------------------------------

def preprocess(frame: np.ndarray) -> np.ndarray:
    """210x160x3 uint8 frame -> 6400 float32 of 0 and 1: crop, downsample by 2, erase the
    background, binarise."""
    field = frame[35:195:2, ::2, 0]
    return ((field != BACKGROUND[0]) & (field != BACKGROUND[1])).astype(np.float32).ravel()


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + γ G_{t+1}``, restarted at every non-zero reward (a point ends a game)."""
    returns = np.zeros_like(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        if rewards[t] != 0:
            running = 0.0
        running = running * gamma + rewards[t]
        returns[t] = running
    return returns


def standardized(values: np.ndarray) -> np.ndarray:
    return (values - values.mean()) / values.std()


class Reference:
    """The post's network, gradient and RMSProp.

    ``head_rows=2`` gives the head a row per action, as volley's categorical head has (without
    its biases), to measure what that difference does. The logit is then the UP row's score
    less the DOWN row's, and the two rows get equal and opposite gradients, hence equal
    RMSProp averages and equal and opposite steps. So ``W2`` here stays that difference: it
    starts as the difference of two N(0, 1/200) rows, and each update steps it twice as far."""

    def __init__(self, rng: np.random.Generator, lr: float = 1e-4, decay: float = 0.99,
                 gamma: float = 0.99, head_rows: int = 1) -> None:
        self.lr, self.decay, self.gamma = lr, decay, gamma
        w1 = rng.standard_normal((HIDDEN, PIXELS)) / np.sqrt(PIXELS)
        w2 = rng.standard_normal((head_rows, HIDDEN)) / np.sqrt(HIDDEN)
        self.model = {"W1": w1.astype(np.float32),
                      "W2": (w2[0] if head_rows == 1 else w2[0] - w2[1]).astype(np.float32)}
        self.step_scale = {"W1": 1.0, "W2": float(head_rows)}
        self.cache = {k: np.zeros_like(v) for k, v in self.model.items()}
        self.grad = {k: np.zeros_like(v) for k, v in self.model.items()}

    def forward(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """P(UP) and the hidden activations for one input."""
        h = np.maximum(self.model["W1"] @ x, 0.0)
        logit = float(self.model["W2"] @ h)
        return 1.0 / (1.0 + np.exp(-logit)), h

    def accumulate(self, xs: np.ndarray, hs: np.ndarray, dlogits: np.ndarray) -> None:
        """Add the gradient of ``Σ_t A_t log π(a_t|x_t)`` (``dlogits`` = ``A_t (y_t - p_t)``)."""
        self.grad["W2"] += hs.T @ dlogits
        dh = np.outer(dlogits, self.model["W2"])
        dh[hs <= 0] = 0.0
        self.grad["W1"] += dh.T @ xs

    def update(self) -> None:
        """One RMSProp ascent step on the summed gradient, which then starts again from zero."""
        for k, param in self.model.items():
            g = self.grad[k]
            self.cache[k] = self.decay * self.cache[k] + (1 - self.decay) * g * g
            param += self.step_scale[k] * self.lr * g / (np.sqrt(self.cache[k]) + 1e-5)
            g[:] = 0.0


def play(env: Any, net: Reference, rng: np.random.Generator
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One episode: inputs [T, 6400] (int8 differences), hidden [T, 200], ``y - p`` [T],
    rewards [T] and the frames it took."""
    frame, _ = env.reset()
    previous = None
    xs, hs, dlogps, rewards = [], [], [], []
    frames, done = 0, False
    while not done:
        current = preprocess(frame)
        x = current - previous if previous is not None else np.zeros(PIXELS, np.float32)
        previous = current
        p, h = net.forward(x)
        action = UP if rng.uniform() < p else DOWN
        xs.append(x.astype(np.int8))
        hs.append(h)
        dlogps.append((1.0 if action == UP else 0.0) - p)
        frame, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        done = terminated or truncated
    frames = int(info["episode_frame_number"])
    return (np.array(xs), np.array(hs), np.array(dlogps, np.float32), np.array(rewards, np.float32),
            frames)


def make_env(variant: str, seed: int) -> Any:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    config = dict(ENV_VARIANTS[variant])
    if isinstance(config.get("frameskip"), list):
        config["frameskip"] = tuple(config["frameskip"])
    env = gym.make("ALE/Pong-v5", **config)
    env.reset(seed=seed)
    return env


def run_reference(args: argparse.Namespace) -> None:
    state_path = args.out.with_suffix(".state.npz")
    rng = np.random.default_rng(args.seed)
    net = Reference(rng, head_rows=args.head_rows)
    episode = 0
    if state_path.exists():
        with np.load(state_path) as data:
            saved = json.loads(str(data["counters"]))
            for k in net.model:
                net.model[k], net.cache[k] = data[k], data["cache_" + k]
        rng.bit_generator.state, episode = saved["rng"], saved["episode"]
    log = EpisodeLog(args.out, episode)
    # a resumed run's environment restarts from a seed of its own (the emulator is not saved)
    env = make_env(args.env_variant, args.seed + 1_000_003 * log.episode)
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    while log.episode < args.episodes:
        xs, hs, dlogps, rewards, frames = play(env, net, rng)
        log.add(float(rewards.sum()), len(rewards), frames)
        pending.append((xs, hs, dlogps, discounted_returns(rewards, net.gamma)))
        if args.standardize == "episode":
            xs, hs, dlogps, returns = pending.pop()
            net.accumulate(xs.astype(np.float32), hs, dlogps * standardized(returns))
        if log.episode % args.batch_episodes == 0:
            if pending:  # --standardize batch: the batch's mean and deviation
                returns = standardized(np.concatenate([p[3] for p in pending]))
                for (xs, hs, dlogps, _), a in zip(pending, np.split(returns, np.cumsum(
                        [len(p[3]) for p in pending])[:-1]), strict=True):
                    net.accumulate(xs.astype(np.float32), hs, dlogps * a)
                pending = []
            net.update()
            counters = {"episode": log.episode, "rng": rng.bit_generator.state}
            tmp = state_path.with_suffix(".tmp.npz")
            np.savez(tmp, counters=json.dumps(counters), **net.model,
                     **{"cache_" + k: v for k, v in net.cache.items()})
            os.replace(tmp, state_path)


# -- volley's preset --------------------------------------------------------------------------

POST_NETWORK = "karpathy_post_network"


def register_post_network() -> None:
    """Register, under ``POST_NETWORK``, the post's network as a custom model for volley: no
    biases, and one logit, P(UP) = σ(w·h). volley's categorical reads it as the logits
    ``[w·h, 0]`` (action 0 is UP, 1 DOWN), whose softmax is that sigmoid and whose gradient at
    ``w·h`` is the post's ``y - p``. The weights start as the reference's (N(0, 1/fan_in)).
    REINFORCE reads no value, so the value is zero."""
    import torch
    from torch import nn

    from volley import ModelCatalog, TorchModelV2

    class PostNetwork(TorchModelV2, nn.Module):
        def __init__(self, obs_space: Any, action_space: Any, num_outputs: int, model_config: dict,
                     name: str) -> None:
            TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
            nn.Module.__init__(self)
            self.hidden = nn.Linear(PIXELS, HIDDEN, bias=False)
            self.up = nn.Linear(HIDDEN, 1, bias=False)
            for layer in (self.hidden, self.up):
                nn.init.normal_(layer.weight, 0.0, 1.0 / np.sqrt(layer.in_features))

        def forward(self, input_dict: dict, state: list, seq_lens: Any) -> tuple[torch.Tensor, list]:
            logit = self.up(torch.relu(self.hidden(input_dict["obs"].flatten(1))))
            self._batch = len(logit)
            return torch.cat([logit, torch.zeros_like(logit)], dim=1), state

        def value_function(self) -> torch.Tensor:
            return torch.zeros(self._batch)

    ModelCatalog.register_custom_model(POST_NETWORK, PostNetwork)


def volley_overrides(network: str) -> dict[str, Any]:
    """The preset's network (``volley``: a row per action, biases) or the post's (``post``)."""
    if network == "volley":
        return {}
    register_post_network()
    return {"model": {"custom_model": POST_NETWORK}}


def run_volley(args: argparse.Namespace) -> None:
    import torch
    import yaml

    from volley import Algorithm
    from volley.presets import load_preset

    torch.set_num_threads(1)
    ckpt = args.out.with_suffix(".ckpt")
    preset = load_preset("pg-pong")
    overrides = {"engine": args.engine, "num_workers": 2, "seed": args.seed, "log_level": "WARNING",
                 "env_config": ENV_VARIANTS[args.env_variant], **volley_overrides(args.network),
                 **{key: yaml.safe_load(value) for key, value in (kv.split("=", 1) for kv in args.set)}}
    if (ckpt / "volley_checkpoint.json").exists():
        algo = Algorithm.from_checkpoint(ckpt, engine=args.engine)
    else:
        algo = preset.make_config(overrides).build()
    log = EpisodeLog(args.out, algo.episodes_total)
    while log.episode < args.episodes:
        result = algo.train()
        returns = result["episode_returns_this_iter"]
        lengths = result["episode_lengths_this_iter"]
        for reward, steps in zip(returns, lengths, strict=True):
            log.add(float(reward), int(steps), None)
        algo.save(ckpt)
    algo.stop()


def check_same_update(variant: str, seed: int, network: str) -> None:
    """Two episodes played by the reference with volley's initial weights, then one update of
    each from them: how far apart the gradients and the steps are.

    With ``network="post"`` volley's network is the post's (:func:`register_post_network`), so
    every number should agree to float32 rounding. With the preset's network (``"volley"``) the
    reference's ``W2`` is the UP row of volley's head less the DOWN row, and two differences
    remain by construction: the difference steps twice as far under RMSProp (compared with the
    reference's ``head_rows=2``), and volley has biases (zero at first, then trained)."""
    import torch

    from volley.presets import load_preset
    from volley.rollout.advantages import returns_columns
    from volley.rollout.batch import Batch

    torch.set_num_threads(1)
    algo = load_preset("pg-pong").make_config(
        {"engine": "local", "num_workers": 0, "mode": "samples", "env_config": ENV_VARIANTS[variant],
         **volley_overrides(network)}).build()
    post = network == "post"
    first, head = ("model.hidden.weight", "model.up.weight") if post else ("pi_body.0.weight", "pi_head.weight")

    def head_logit(weights: dict[str, np.ndarray]) -> np.ndarray:  # the weights of P(UP)'s logit
        return weights[head][0] if post else weights[head][0] - weights[head][1]  # action 0 is UP

    start = algo.policy.get_weights()
    rng = np.random.default_rng(seed)
    net = Reference(rng, head_rows=1 if post else 2)
    net.model = {"W1": start[first].copy(), "W2": head_logit(start).copy()}
    env = make_env(variant, seed)
    columns: dict[str, list[np.ndarray]] = {"obs": [], "actions": [], "rewards": [], "cuts": []}
    for _ in range(2):
        xs, hs, dlogps, rewards, _ = play(env, net, rng)
        net.accumulate(xs.astype(np.float32), hs, dlogps * standardized(discounted_returns(rewards, net.gamma)))
        columns["obs"].append(xs.astype(np.float32))
        columns["actions"].append(np.where(dlogps > 0, 0, 1))  # y - p > 0 exactly when UP was taken
        columns["rewards"].append(rewards)
        columns["cuts"].append(np.arange(len(rewards)) == len(rewards) - 1)
    joined = {key: np.concatenate(parts) for key, parts in columns.items()}
    joined["valid"] = np.ones(len(joined["rewards"]), bool)
    batch = Batch({k: v for k, v in returns_columns(joined, algo.config).items() if k != "valid"})
    algo.optimizer.zero_grad()
    algo.loss(batch).backward()  # volley descends -Σ A log π: its gradient is minus the reference's
    grads = {name: -p.grad.numpy() for name, p in algo.policy.named_parameters() if p.grad is not None}
    reference_grads = {k: v.copy() for k, v in net.grad.items()}
    net.update()
    algo.optimizer.step()
    after = algo.policy.get_weights()

    def apart(a: np.ndarray, b: np.ndarray) -> str:
        return f"{np.abs(a - b).max() / np.abs(b).max():.1e}"

    head_step = head_logit(after) - head_logit(start)
    reference_head_step = net.model["W2"] - head_logit(start)
    lines = [f"{network} network, {len(batch['obs'])} steps; max |volley - reference| / max |reference|:",
             f"  first-layer gradient {apart(grads[first], reference_grads['W1'])}",
             f"  head gradient, UP {apart(grads[head][0], reference_grads['W2'])}",
             f"  first-layer RMSProp step {apart(after[first] - start[first], net.model['W1'] - start[first])}",
             f"  UP logit's head step {apart(head_step, reference_head_step)}"]
    if not post:  # the DOWN row, the one-row post's half step, and the biases the reference lacks
        lines[2] += f", DOWN row {apart(-grads[head][1], reference_grads['W2'])}"
        lines[4] += (f" (against the two-row reference, --head-rows 2), against the post's one row "
                     f"(half of it) {apart(head_step, reference_head_step / 2)}")
        lines.append(f"volley's bias gradients (the reference has no biases): hidden up to "
                     f"{np.abs(grads['pi_body.0.bias']).max():.2f}, head {grads['pi_head.bias'].round(2).tolist()}")
    print("\n".join(lines))
    algo.stop()


# -- the report -------------------------------------------------------------------------------

def read_runs(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every ``<library>-<variant>-s<seed>[-tag].jsonl`` log in ``folder``, by file stem."""
    return {path.stem: [json.loads(line) for line in path.read_text().splitlines() if line]
            for path in sorted(folder.glob("*.jsonl"))}


def report(folder: Path, png: Path | None, marks: tuple[int, ...] = (1000, 2000, 3000, 4000, 5000, 6000)) -> None:
    """Print the running reward of every run at ``marks`` episodes (a Markdown table, with the
    env steps per wall-clock second over the whole run) and draw running reward against
    episodes, one panel per environment variant."""
    runs = read_runs(folder)
    print("| run | episodes | env steps/s | " + " | ".join(f"at {m:,}" for m in marks) + " |")
    print("| --- | --- | --- |" + " --- |" * len(marks))
    for name, rows in runs.items():
        cells = [f"{rows[m - 1]['running_reward']:.1f}" if len(rows) >= m else "" for m in marks]
        rate = f"{rows[-1]['env_steps'] / rows[-1]['wall_s']:,.0f}" if rows else ""
        print(f"| {name} | {len(rows):,} | {rate} | " + " | ".join(cells) + " |")
    if png is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = sorted(ENV_VARIANTS)
    fig, axes = plt.subplots(1, len(variants), figsize=(6 * len(variants), 4.5), sharey=True)
    colours: dict[str, str] = {}
    for name, rows in runs.items():
        library, variant, rest = name.split("-", 2)
        seed, _, tag = rest.partition("-")
        label = library + (f" ({tag})" if tag else "")
        colour = colours.setdefault(label, f"C{len(colours)}")
        ax = axes[variants.index(variant)]
        ax.plot([r["episode"] for r in rows], [r["running_reward"] for r in rows], color=colour,
                linestyle="-" if seed == "s0" else "--", linewidth=1.2, label=f"{label}, seed {seed[1:]}")
    for ax, variant in zip(axes, variants, strict=True):
        ax.set_title({"v5": "ALE/Pong-v5 (4 frames per action, sticky actions 0.25)",
                      "2016": "2016 Pong-v0 dynamics (2-4 frames per action, no sticky actions)"}[variant],
                     fontsize=10)
        ax.set_xlabel("episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("running reward (0.99 / 0.01)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", choices=["reference", "volley"], default="reference")
    parser.add_argument("--env-variant", choices=sorted(ENV_VARIANTS), default="2016")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--out", type=Path, help="JSON lines, one per episode")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="instead of training: the table of every log in DIR (and --png)")
    parser.add_argument("--png", type=Path, help="with --report: the curves' plot")
    parser.add_argument("--check", action="store_true",
                        help="instead of training: volley's first update beside the reference's, same episodes")
    parser.add_argument("--standardize", choices=["episode", "batch"], default="episode",
                        help="reference: standardise the returns over each episode (the post's script) "
                             "or over the batch")
    parser.add_argument("--batch-episodes", type=int, default=10, help="reference: episodes per update")
    parser.add_argument("--head-rows", type=int, choices=[1, 2], default=1,
                        help="reference: 2 gives the head a row per action, as volley's has (see Reference)")
    parser.add_argument("--network", choices=["volley", "post"], default="volley",
                        help="volley: the preset's network (a row per action, biases) or the post's, as a "
                             "custom model (one logit, no biases)")
    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help="volley: 'local' steps the 2 workers in this process (pausable, the learning "
                             "is the same); 'ray' runs them as 2 Ray actors, for timing")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="volley: a config key on top of the preset's (YAML value), repeatable")
    args = parser.parse_args()
    if args.report is not None:
        report(args.report, args.png)
        return
    if args.check:
        check_same_update(args.env_variant, args.seed, args.network)
        return
    if args.out is None:
        parser.error("--out is required to train (or --report DIR)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    (run_reference if args.library == "reference" else run_volley)(args)


if __name__ == "__main__":
    main()
