"""Videos and the driver's environment of multi-agent runs: evaluation recorded one frame per
environment step (make_multi_agent's CartPole, a PettingZoo game drawn by pygame), ``algo.env``
the multi-agent environment evaluate() plays, and a driver that takes the policies added later."""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3

from volley import PettingZooEnv, PPOConfig, register_env
from volley.learner.base import EVAL_SEED_OFFSET
from volley.video import FrameRecorder, write_video

register_env("drawn_connect_four", lambda config: PettingZooEnv(connect_four_v3.env(render_mode="rgb_array")))


def quick(env: str, **env_config: int) -> PPOConfig:
    return PPOConfig().environment(env, env_config=env_config).update(engine="local", num_workers=0, seed=5)


def test_render_env_records_a_pettingzoo_game_one_frame_per_move(tmp_path: Path):
    config = quick("drawn_connect_four").evaluation(evaluation_duration=2,
                                                    evaluation_config=PPOConfig.overrides(render_env=True))
    with config.build() as algo:
        algo.results_dir = tmp_path
        evaluation = algo.evaluate()
    video = Path(evaluation["video"])
    assert video.parent == tmp_path / "videos"
    frames = imageio.mimread(video, memtest=False)
    assert len(frames) == evaluation["timesteps_this_iter"] == 2 * evaluation["episode_len_mean"] > 2
    assert frames[0].ndim == 3 and frames[0].std() > 5  # the board, drawn
    assert not np.array_equal(frames[0], frames[1])  # a move between them


def test_multi_agent_cartpole_is_recorded_from_agent_0s_copy(tmp_path: Path):
    with quick("MultiAgentCartPole", num_agents=2).build() as algo:
        recorder = FrameRecorder(algo.driver_worker(), "MultiAgentCartPole")
        stats = algo.evaluate(1, before_step=recorder)
    assert recorder.failure is None and recorder.fps == 50  # CartPole's render_fps
    write_video(recorder.frames, tmp_path / "episode.mp4", recorder.fps)
    frames = imageio.mimread(tmp_path / "episode.mp4", memtest=False)
    assert len(frames) == stats["episode_len_mean"] > 2  # one per step of the environment, as single-agent
    assert frames[0].shape == (400, 600, 3)


def test_an_environment_without_rgb_array_render_is_said_in_one_line():
    register_env("undrawn_connect_four", lambda config: PettingZooEnv(connect_four_v3.env()))
    with quick("undrawn_connect_four").build() as algo:
        recorder = FrameRecorder(algo.driver_worker(), "undrawn_connect_four")
        algo.evaluate(1, before_step=recorder)
    assert recorder.frames == []
    assert recorder.failure == ("ValueError: its render() gave None, not an RGB image: make it with "
                                "render_mode='rgb_array'")


def test_algo_env_is_the_multi_agent_environment_evaluate_plays():
    """Stepping ``algo.env`` by hand with compute_single_action replays evaluate()'s episode; the
    driver has it at build time with create_env_on_driver, beside a rollout worker."""
    config = quick("MultiAgentCartPole", num_agents=2).update(num_workers=1, create_env_on_driver=True)
    with config.build() as algo:
        env = algo.env
        assert env is algo.workers.local.env
        obs, _ = env.reset(seed=config.seed + EVAL_SEED_OFFSET)
        total, steps, done = 0.0, 0, False
        while not done:
            actions = {agent: algo.compute_single_action(o, policy_id="default_policy") for agent, o in obs.items()}
            obs, rewards, terminateds, truncateds, _ = env.step(actions)
            total, steps = total + sum(rewards.values()), steps + 1
            done = terminateds["__all__"] or truncateds["__all__"]
        stats = algo.evaluate(1)
    assert (stats["episode_reward_mean"], stats["episode_len_mean"]) == (total, steps)


@pytest.mark.parametrize("evaluation_num_workers", [0, 1])
def test_the_driver_and_evaluation_workers_take_a_policy_added_after_they_were_built(evaluation_num_workers: int):
    mapped: list[tuple[int, str]] = []

    def per_agent(agent_id: int, episode: object, worker: object, **kwargs: object) -> str:
        mapped.append((agent_id, f"p{agent_id}"))
        return f"p{agent_id}"

    config = quick("MultiAgentCartPole", num_agents=2).multi_agent(
        policies={"p0"}, policy_mapping_fn=lambda agent_id, episode, worker, **kwargs: "p0").evaluation(
        evaluation_num_workers=evaluation_num_workers)
    with config.build() as algo:
        algo.evaluate(1)  # builds the driver's worker (or uses the evaluation worker), which has p0 alone
        algo.add_policy("p1", policy_mapping_fn=per_agent)
        played = algo.evaluate(1)
    assert played["episodes_this_iter"] == 1
    assert (1, "p1") in mapped
