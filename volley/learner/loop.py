"""The learner, composed: the training loop (:meth:`Learner.train`) over the roles, each a mixin
in its own module: sampling, the gradient step, results, evaluation, inference and checkpoints,
all on the state :class:`volley.learner.base.LearnerBase` builds. Nothing here knows an
algorithm: :class:`volley.algorithm.Algorithm` adds the registry, and each algorithm its
``setup``, ``postprocess`` and ``training_step``."""

from __future__ import annotations

import time
from typing import Any

from volley.learner.evaluation import Evaluation, set_env_tasks
from volley.learner.inference import Inference
from volley.learner.results import Results
from volley.learner.state import Checkpoints
from volley.learner.step import GradientSteps


class Learner(Evaluation, Inference, GradientSteps, Results, Checkpoints):
    """Every role of the learner, and the loop that runs an iteration."""

    def train(self) -> dict[str, Any]:
        """Run one training iteration and return its result dict: flat keys (``episode_reward_mean``,
        ``timesteps_total``, the algorithm's statistics, ...), which progress.jsonl and TensorBoard
        record, and RLlib's nested views of the same numbers, which they do not
        (``result["env_runners"]["episode_return_mean"]``, ``result["learners"]["default_policy"]``;
        see ``volley.rllib_results.training_views``).

        The training step repeats until ``min_sample_timesteps_per_iteration`` steps were sampled
        and ``min_time_s_per_iteration`` seconds passed (once by default).
        """
        start = time.perf_counter()
        self.workers.begin_iteration()
        self._sample_time, self._steps_this_iter = 0.0, 0
        self._returns_this_iter, self._lengths_this_iter = [], []
        stats = self.training_step()
        while (self._steps_this_iter < self.config.min_sample_timesteps_per_iteration
               or time.perf_counter() - start < self.config.min_time_s_per_iteration):
            stats = self.training_step()
        self.iteration += 1
        interval = self.config.evaluation_interval
        evaluation = self.evaluate() if interval and self.iteration % interval == 0 else None
        result = self.close_iteration(time.perf_counter() - start, stats, evaluation)
        if self.is_driver:
            self.hooks("on_train_result", algorithm=self, result=result)
            set_env_tasks(self, result)  # RLlib's env_task_fn: the next tasks of a curriculum
            self.log_result(result)
        return result

    def serve_forever(self) -> None:
        """On MPI ranks other than 0: serve rank 0 (gather mode) or train in step with it
        (allreduce mode) until rank 0 calls :meth:`stop`. On the driver it returns at once.

        ``volley.run.train_until`` and ``volley train`` call it; a script does::

            with config.build() as algo:
                if algo.is_driver:
                    ...  # train, evaluate, save
                else:
                    algo.serve_forever()
        """
        self.workers.serve_forever(self)
