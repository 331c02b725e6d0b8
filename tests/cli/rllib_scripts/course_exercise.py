"""A classic RLlib 2.x course exercise with only the imports changed: train PPO on CartPole until
it balances, save a checkpoint, restore it with ``Algorithm.from_checkpoint`` and play an
episode with ``compute_single_action``."""

import gymnasium as gym

from volley import Algorithm, PPOConfig  # was: ray.rllib.algorithms.algorithm / .ppo

config = (
    PPOConfig()
    .environment("CartPole-v1")
    .rollouts(num_rollout_workers=1)
    .framework("torch")
    .training(model={"fcnet_hiddens": [64, 64]}, lr=0.001)
    .debugging(seed=0)
)
algo = config.build()

for i in range(40):
    result = algo.train()
    print(f"iteration {i}: episode_reward_mean={result['episode_reward_mean']:.1f} "
          f"timesteps_total={result['timesteps_total']}")
    if result["episode_reward_mean"] >= 200:
        break

save_result = algo.save()
path_to_checkpoint = save_result.checkpoint.path
print(f"checkpoint saved in directory {path_to_checkpoint}")
algo.stop()

restored = Algorithm.from_checkpoint(path_to_checkpoint)
env = gym.make("CartPole-v1")
obs, info = env.reset(seed=0)
episode_return, done = 0.0, False
while not done:
    action = restored.compute_single_action(obs, explore=False)
    obs, reward, terminated, truncated, info = env.step(action)
    episode_return += reward
    done = terminated or truncated
print(f"restored policy, iteration {restored.iteration}: episode return {episode_return}")
restored.stop()
