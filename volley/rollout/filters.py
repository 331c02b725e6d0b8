"""Running statistics that workers keep and the driver merges exactly: observations and rewards.

Each worker normalises with the statistics it was last sent plus what it has seen
since, and keeps those new observations apart (``delta``). Every iteration the
driver merges all workers' deltas into the global statistics with Chan et al.'s
parallel update and sends the result back, so every worker ends up with the
statistics of the concatenated data. Two filters work this way: the observation
filter (:class:`MeanStdFilter`) and the reward normaliser (:class:`RewardNormalizer`);
:class:`FilterStats` carries both between driver and workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volley.observations import ObsPreprocessor


class RunningStats:
    """Count, mean and sum of squared deviations (M2) of a stream of vectors."""

    def __init__(self, shape: tuple[int, ...], count: float = 0.0, mean: np.ndarray | None = None,
                 m2: np.ndarray | None = None) -> None:
        self.shape = tuple(shape)
        self.count = count
        self.mean = np.zeros(self.shape) if mean is None else mean
        self.m2 = np.zeros(self.shape) if m2 is None else m2

    def push(self, batch: np.ndarray) -> np.ndarray:
        """Add a batch of observations ``[B, *shape]`` (as :meth:`merge` of its statistics); returns
        the batch minus the new mean, what normalising needs. The hot path of every filter, so
        a one-row batch takes Welford's update, whose centred row comes without a numpy call
        of its own (five calls a step)."""
        count = len(batch)
        total = self.count + count
        if count == 1:
            delta = batch[0] - self.mean
            centred = delta * (self.count / total)  # x - (mean + delta / total)
            self.mean = batch[0] - centred
            self.m2 = self.m2 + delta * centred  # (x - old mean)·(x - new mean) = delta²·count/total
            self.count = total
            return centred[None]
        batch_mean = batch.mean(axis=0, dtype=np.float64)
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (count / total)
        self.m2 = self.m2 + ((batch - batch_mean) ** 2).sum(axis=0) + delta**2 * (self.count * count / total)
        self.count = total
        return batch - self.mean

    def since(self, earlier: RunningStats) -> RunningStats:
        """The statistics of what was added after ``earlier`` (a copy of these, taken before):
        Chan's merge solved for the part that was merged in."""
        count = self.count - earlier.count
        if count <= 0:
            return RunningStats(self.shape)
        mean = (self.mean * self.count - earlier.mean * earlier.count) / count
        m2 = self.m2 - earlier.m2 - (mean - earlier.mean) ** 2 * (earlier.count * count / self.count)
        return RunningStats(self.shape, count, mean, np.maximum(m2, 0.0))

    def copy(self) -> RunningStats:
        return RunningStats(self.shape, self.count, np.copy(self.mean), np.copy(self.m2))

    @classmethod
    def of(cls, batch: np.ndarray) -> RunningStats:
        """Statistics of one batch ``[B, *shape]``."""
        batch = np.asarray(batch, np.float64)
        mean = batch.mean(axis=0)
        return cls(batch.shape[1:], float(len(batch)), mean, ((batch - mean) ** 2).sum(axis=0))

    def merge(self, other: RunningStats) -> None:
        """Fold ``other`` in, as if its observations had been pushed here."""
        if other.count == 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / total)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation (1 before any data, so nothing is divided by 0)."""
        if self.count < 2:
            return np.ones(self.shape)
        return np.sqrt(self.m2 / self.count)

    def to_state(self) -> dict:
        """Plain data for checkpoints and messages."""
        return {"count": self.count, "mean": self.mean.tolist(), "m2": self.m2.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> RunningStats:
        mean = np.asarray(state["mean"], np.float64)
        return cls(mean.shape, float(state["count"]), mean, np.asarray(state["m2"], np.float64))


class MeanStdFilter:
    """``(x - mean) / (std + 1e-8)``, clipped to ``[-clip, clip]``; updates while sampling.

    What it has seen since it was last synced (``pop_delta``) is the difference between its
    statistics and a copy taken at the sync, so each step updates one set of statistics.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, unfiltered: slice | None = None) -> None:
        """``unfiltered``: columns passed through as they are (an action mask's 0s and 1s)."""
        self.clip = clip
        self.stats = RunningStats(shape)
        self.synced = RunningStats(shape)  # the statistics at the last set_stats or pop_delta
        self.unfiltered = unfiltered

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        centred = self.stats.push(obs) if update else obs - self.stats.mean
        normed = centred / (self.stats.std + 1e-8)
        # minimum and maximum: np.clip's result in two thirds of its time, on every step
        out = np.minimum(np.maximum(normed, -self.clip, out=normed), self.clip, out=normed).astype(np.float32)
        if self.unfiltered is not None:
            out[:, self.unfiltered] = obs[:, self.unfiltered]
        return out

    def pop_delta(self) -> RunningStats:
        """The statistics gathered since the last call, handed to the driver to merge."""
        delta, self.synced = self.stats.since(self.synced), self.stats.copy()
        return delta

    def set_stats(self, stats: RunningStats) -> None:
        """Replace the statistics with the merged global ones."""
        self.stats, self.synced = stats.copy(), stats.copy()


class NoFilter:
    """Passes observations through unchanged."""

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        return obs

    def pop_delta(self) -> None:
        return None

    def set_stats(self, stats: RunningStats | None) -> None:
        return None


def make_filter(name: str, observation: ObsPreprocessor) -> MeanStdFilter | NoFilter:
    """The filter named by ``config.observation_filter`` over the columns of ``observation`` (a
    :class:`volley.network_spec.NetworkSpec`'s layout), its action mask left as it is."""
    if name != "MeanStdFilter":
        return NoFilter()
    return MeanStdFilter(observation.shape, unfiltered=None if observation.mask is None else observation.mask.mask)


class RewardNormalizer:
    """Divides rewards by the running standard deviation of the discounted return, then clips.

    As SB3's ``VecNormalize(norm_reward=True)`` and CleanRL's ``NormalizeReward``: each
    environment keeps ``G ← γ·G + r`` (restarted at every episode end), its values feed the
    running variance, and ``r / sqrt(var + 1e-8)`` is what the algorithm learns from. The
    scale, not the sign or the mean, is what makes one learning rate and one value-loss
    weight fit tasks whose returns differ by orders of magnitude (MuJoCo's thousands,
    CartPole's hundreds). Episode statistics always report the raw rewards.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0) -> None:
        self.gamma, self.clip = gamma, clip
        self.returns = np.zeros(num_envs)
        self.stats = RunningStats(())
        self.synced = RunningStats(())

    def __call__(self, rewards: np.ndarray, valid: np.ndarray, ended: np.ndarray,
                 update: bool = True) -> np.ndarray:
        """Normalised ``rewards`` ``[N]``; with ``update``, the valid steps' discounted returns
        join the statistics first (``ended``: the envs whose episode ended on this step)."""
        if update:
            self.returns = self.returns * self.gamma + rewards
            if valid.any():
                self.stats.push(self.returns[valid])
            self.returns[ended] = 0.0
        scaled = rewards / np.sqrt(self.stats.std**2 + 1e-8)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def pop_delta(self) -> RunningStats:
        delta, self.synced = self.stats.since(self.synced), self.stats.copy()
        return delta

    def set_stats(self, stats: RunningStats) -> None:
        self.stats, self.synced = stats.copy(), stats.copy()


@dataclass
class FilterStats:
    """What the workers' filters share with the driver: observation statistics and the reward
    normaliser's return statistics (None where that filter is off). The driver sends the
    merged ones with every sample call; workers send back what they saw since (a delta)."""

    obs: RunningStats | None = None
    reward: RunningStats | None = None

    def merge(self, other: FilterStats | None) -> None:
        """Fold ``other`` (a worker's delta) in, filter by filter."""
        if other is None:
            return
        for mine, theirs in ((self.obs, other.obs), (self.reward, other.reward)):
            if mine is not None and theirs is not None:
                mine.merge(theirs)

    def to_state(self) -> dict:
        return {"obs": None if self.obs is None else self.obs.to_state(),
                "reward": None if self.reward is None else self.reward.to_state()}
