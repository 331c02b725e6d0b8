"""RLlib's PPO quick-start (the PPOConfig docstring of RLlib 2.x) with only the import changed."""

from pprint import pprint

from volley import PPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

config = (
    PPOConfig()
    .environment("CartPole-v1")
    .env_runners(num_env_runners=1)
    .training(gamma=0.9, lr=0.01, kl_coeff=0.3, train_batch_size=4000)
)

# Build an Algorithm object from the config and run 5 training iterations.
algo = config.build()
for _ in range(5):
    result = algo.train()
    print(f"episode_return_mean={result['env_runners']['episode_return_mean']} "
          f"num_env_steps_sampled_lifetime={result['num_env_steps_sampled_lifetime']} "
          f"curr_kl_coeff={result['learners']['default_policy']['curr_kl_coeff']}")

# Evaluate it.
pprint(algo.evaluate())
algo.stop()
