"""RLlib 2.x's "RLlib in 60 seconds" (rllib_in_60s.py) with only the import changed.

``WORKERS`` stands for RLlib's 2 rollout workers: with the evaluation worker they need
3 CPUs, and a test machine with fewer passes 1 (``sys.argv[1]``). RLlib's Taxi-v3 is
Taxi-v4 in the Gymnasium installed here, which registers no v3 (RLlib's script fails on
it as well; volley's error says "did you mean 'Taxi-v4'?").
"""

import sys

from volley import PPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

WORKERS = int(sys.argv[1]) if len(sys.argv) > 1 else 2

config = (  # 1. Configure the algorithm,
    PPOConfig()
    .environment("Taxi-v4")
    .rollouts(num_rollout_workers=WORKERS)
    .framework("torch")
    .training(model={"fcnet_hiddens": [64, 64]})
    .evaluation(evaluation_num_workers=1)
)

algo = config.build()  # 2. build the algorithm,

for _ in range(5):
    print(algo.train())  # 3. train it,

print(algo.evaluate())  # 4. and evaluate it.
algo.stop()
