"""Action distributions of every space volley's policies take, against torch.distributions part by
part; the numpy heads workers draw with against the torch distributions learners score with; masks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple

from volley import Algorithm, ModelConfig, PPOConfig, TorchCategorical, TorchDiagGaussian
from volley.acting import NumpyActor
from volley.catalog import build_policy
from volley.distributions import Categorical, EpsilonGreedy, action_distribution, masked
from volley.errors import ConfigError, VolleyError
from volley.heads import action_head, epsilon_greedy_logp
from volley.observations import find_action_mask
from volley.rollout.streams import EnvStreams
from volley.spaces import MASKED, action_layout

NESTED = Dict({"a": Tuple([Dict({"d": Box(-10.0, 10.0, ()), "e": Discrete(3)})]), "b": Box(-10.0, 10.0, (2,)),
               "c": MultiDiscrete([3, 3]), "d": Discrete(2)})  # RLlib's nested_action_spaces example
SPACES = {
    "multidiscrete": MultiDiscrete([3, 2, 4]),
    "multibinary": MultiBinary(3),
    "box_2x3": Box(-1.0, 1.0, (2, 3), np.float32),
    "int_box": Box(0, 2, (2,), np.int64),
    "tuple": Tuple([Discrete(2), Discrete(3)]),
    "nested": NESTED,
}


def reference_parts(space: gym.Space, log_stds: bool) -> list[tuple[str, int, int]]:
    """Each part as (kind, width in the inputs, columns in the actions), written out by hand from
    the layout the docs give: a categorical per Discrete, per MultiDiscrete / MultiBinary / integer
    Box element; a float Box's values as Normals."""
    if isinstance(space, Dict):
        return [p for s in space.spaces.values() for p in reference_parts(s, log_stds)]
    if isinstance(space, Tuple):
        return [p for s in space.spaces for p in reference_parts(s, log_stds)]
    if isinstance(space, Discrete):
        return [("categorical", int(space.n), 1)]
    if isinstance(space, MultiDiscrete):
        return [("categorical", int(n), 1) for n in space.nvec]
    if isinstance(space, MultiBinary):
        return [("categorical", 2, 1)] * int(space.n)
    if space.dtype.kind == "i":
        return [("categorical", int(h - lo + 1), 1) for lo, h in zip(space.low.ravel(), space.high.ravel(), strict=True)]
    d = int(np.prod(space.shape))
    return [("normal", 2 * d if log_stds else d, d)]


def reference(space: gym.Space, inputs: torch.Tensor, log_std: torch.Tensor | None) -> list:
    """torch.distributions objects, one per part, and the action columns each scores."""
    parts, at, column, box = [], 0, 0, 0
    for kind, width, columns in reference_parts(space, log_std is None):
        x = inputs[:, at:at + width]
        if kind == "categorical":
            parts.append((torch.distributions.Categorical(logits=x), slice(column, column + 1)))
        else:
            mean, stds = (x.chunk(2, -1) if log_std is None else (x, log_std[box:box + columns].expand_as(x)))
            parts.append((torch.distributions.Normal(mean, stds.exp()), slice(column, column + columns)))
            box += columns
        at, column = at + width, column + columns
    return parts


def sample_actions(space: gym.Space, rows: int, rng: np.random.Generator) -> np.ndarray:
    columns = []
    for kind, width, n in reference_parts(space, False):
        columns.append(rng.integers(0, width, (rows, 1)) if kind == "categorical" else rng.normal(size=(rows, n)))
    return np.concatenate(columns, 1)


@pytest.mark.parametrize("log_stds", [False, True], ids=["volley_network", "custom_model"])
@pytest.mark.parametrize("name", SPACES)
def test_a_composite_is_the_product_of_torch_distributions_parts(name, log_stds):
    space, rng = SPACES[name], np.random.default_rng(0)
    layout = action_layout(space)
    width = layout.inputs(log_stds).width
    assert width == sum(w for _, w, _ in reference_parts(space, log_stds))
    inputs, other = (torch.as_tensor(rng.normal(size=(5, width)), dtype=torch.float32) for _ in range(2))
    log_std = None if log_stds else torch.as_tensor(rng.normal(size=layout.dims) * 0.3, dtype=torch.float32)
    ours, theirs = action_distribution(layout, inputs, log_std), action_distribution(layout, other, log_std)
    actions = torch.as_tensor(sample_actions(space, 5, rng), dtype=torch.float32 if layout.dims else torch.int64)
    ref, ref_other = reference(space, inputs, log_std), reference(space, other, log_std)

    def summed(values: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([v.reshape(5, -1).sum(-1) for v in values]).sum(0)

    want_logp = summed([d.log_prob(actions[:, c].squeeze(-1) if isinstance(d, torch.distributions.Categorical)
                                   else actions[:, c]) for d, c in ref])
    torch.testing.assert_close(ours.log_prob(actions), want_logp)
    torch.testing.assert_close(ours.entropy(), summed([d.entropy() for d, _ in ref]))
    torch.testing.assert_close(ours.kl(theirs), summed([torch.distributions.kl_divergence(d, o)
                                                        for (d, _), (o, _) in zip(ref, ref_other, strict=True)]))
    # TRPO rebuilds a distribution from its inputs to differentiate the KL through them
    torch.testing.assert_close(ours.with_inputs(*ours.inputs).log_prob(actions), want_logp)
    # workers draw in numpy: the same log-probabilities for a fragment [T, B], the same mode
    head = action_head(layout, None if log_std is None else log_std.numpy())
    fragment = np.stack([inputs.numpy(), other.numpy()])
    np.testing.assert_allclose(head.log_prob(fragment, np.stack([actions.numpy()] * 2)),
                               np.stack([want_logp.numpy(), theirs.log_prob(actions).numpy()]), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(head.draw(inputs.numpy(), EnvStreams(0, list(range(5))), False),
                                  ours.mode().numpy())


def test_composite_draws_follow_each_parts_probabilities():
    space = Tuple([Discrete(3), MultiDiscrete([2, 2]), Box(-1.0, 1.0, (2,), np.float32)])
    layout = action_layout(space)
    n = 20_000
    logits = np.log([0.1, 0.6, 0.3, 0.8, 0.2, 0.5, 0.5])
    inputs = np.concatenate([logits, [0.5, -1.0]]).astype(np.float32)[None].repeat(n, 0)
    head = action_head(layout, np.array([0.2, -0.4], np.float32))
    draws = head.draw(inputs, EnvStreams(0, list(range(n))), True)
    assert draws.shape == (n, 5) and draws.dtype == np.float32
    np.testing.assert_allclose(np.bincount(draws[:, 0].astype(int), minlength=3) / n, [0.1, 0.6, 0.3], atol=0.015)
    np.testing.assert_allclose(draws[:, 1].mean(), 0.2, atol=0.015)
    np.testing.assert_allclose(draws[:, 2].mean(), 0.5, atol=0.015)
    np.testing.assert_allclose(draws[:, 3:].mean(0), [0.5, -1.0], atol=0.03)
    np.testing.assert_allclose(draws[:, 3:].std(0), np.exp([0.2, -0.4]), rtol=0.03)


def test_flat_actions_reach_the_environment_in_the_spaces_structure():
    layout = action_layout(NESTED)
    flat = np.array([[1.5, 2, -3.0, 4.0, 1, 2, 1], [0.0, 0, 20.0, 0.5, 0, 0, 0]], np.float32)
    first, second = layout.to_env(flat, normalize=False, clip=True)
    assert NESTED.contains(first) and NESTED.contains(second)
    assert first["a"][0]["e"] == 2 and first["d"] == 1 and list(first["c"]) == [1, 2]
    np.testing.assert_array_equal(second["b"], [10.0, 0.5])  # clipped to the bounds
    assert first["a"][0]["d"].shape == () and first["a"][0]["d"] == 1.5
    normalized = layout.to_env(flat[:1], normalize=True, clip=False)[0]
    np.testing.assert_allclose(normalized["b"], [-10.0, 10.0])  # [-1, 1] rescaled, beyond clipped
    md = action_layout(MultiDiscrete([3, 4], start=[1, -2]))
    np.testing.assert_array_equal(md.to_env(np.array([[2, 0]]), False, False), [[3, -2]])
    box = action_layout(Box(-1.0, 1.0, (2, 3), np.float32)).to_env(np.zeros((4, 6), np.float32), False, True)
    assert box.shape == (4, 2, 3) and box.dtype == np.float32


def test_a_masked_choice_has_probability_zero_and_entropy_and_kl_stay_finite():
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 3.0]], requires_grad=True)
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1]])
    dist = Categorical(masked(logits, mask))
    assert (dist.inputs[0][mask == 0] == torch.finfo(torch.float32).min).all()  # the minimum, not -inf
    ref = torch.distributions.Categorical(logits=logits.detach()[:, [0, 2]])
    torch.testing.assert_close(dist.entropy()[0], ref.entropy()[0])
    torch.testing.assert_close(dist.log_prob(torch.tensor([2, 3])), torch.stack(
        [ref.log_prob(torch.tensor(1))[0], torch.distributions.Categorical(logits=logits.detach()[1, 2:]).log_prob(
            torch.tensor(1))]))
    assert torch.exp(dist.log_prob(torch.tensor([1, 0]))).eq(0).all()
    other = Categorical(masked(logits * 2, mask))
    loss = dist.entropy().sum() + dist.kl(other).sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert (logits.grad[mask == 0] == 0).all()  # a masked logit learns nothing


def test_epsilon_greedy_shares_epsilon_among_the_allowed_actions():
    q = np.array([[1.0, 5.0, 2.0, 0.0]], np.float32)
    q_masked = np.where([[1, 0, 1, 1]], q, MASKED).astype(np.float32)
    logp = epsilon_greedy_logp(q_masked, 0.3, masked=True)
    np.testing.assert_allclose(np.exp(logp), [[0.1, 0.0, 0.8, 0.1]], rtol=1e-6)
    assert logp[0, 1] == MASKED
    torch.testing.assert_close(EpsilonGreedy(torch.as_tensor(q_masked), 0.3).logits.exp(),
                               torch.tensor([[0.1, 0.0, 0.8, 0.1]]))
    np.testing.assert_allclose(np.exp(epsilon_greedy_logp(q, 0.3)), [[0.075, 0.775, 0.075, 0.075]], rtol=1e-6)


MASKED_OBS = Dict({"action_mask": Box(0.0, 1.0, (5,), np.float32), "observations": Box(-5.0, 5.0, (7,), np.float32)})


def masked_obs(rows: int, rng: np.random.Generator) -> np.ndarray:
    mask = (rng.random((rows, 5)) < 0.5).astype(np.float32)
    mask[np.arange(rows), rng.integers(0, 5, rows)] = 1.0  # at least one allowed
    return np.concatenate([mask, rng.normal(size=(rows, 7)).astype(np.float32)], 1)  # the Dict's key order


@pytest.mark.parametrize(("action_space", "obs_space", "network"), [
    (MultiDiscrete([3, 2, 4]), Box(-5.0, 5.0, (7,), np.float32), "actor_critic"),
    (NESTED, Box(-5.0, 5.0, (7,), np.float32), "actor_critic"),
    (Box(-1.0, 1.0, (2, 3), np.float32), Box(-5.0, 5.0, (7,), np.float32), "actor_critic"),
    (Discrete(5), MASKED_OBS, "actor_critic"),
    (Discrete(5), MASKED_OBS, "dueling_q"),
])
def test_acting_in_numpy_matches_the_torch_network_for_every_space_and_mask(action_space, obs_space, network):
    torch.manual_seed(0)
    pre, policy = build_policy(obs_space, action_space, ModelConfig(log_std_init=-0.5), network)
    if network != "actor_critic":
        policy.set_epsilon(0.5)
    rng = np.random.default_rng(1)
    obs = masked_obs(6, rng) if pre.mask is not None else rng.normal(size=(6, 7)).astype(np.float32)
    twin = policy.numpy_twin()
    assert twin is not None  # volley's MLP acts in numpy, masked or not
    actions, inputs, values, _ = twin.act(obs, [], EnvStreams(0, list(range(6))), True)
    torch_actions, torch_inputs, torch_values, _ = policy._torch_twin().act(obs, [], EnvStreams(0, list(range(6))), True)
    np.testing.assert_allclose(actions, torch_actions, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inputs, torch_inputs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, torch_values, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        want = policy.distribution_of(torch.as_tensor(inputs)).log_prob(torch.as_tensor(actions)).numpy()
    np.testing.assert_allclose(twin.log_prob(inputs, actions), want, rtol=1e-5, atol=1e-5)
    actor = NumpyActor(pre.net_shape[0], action_space, ModelConfig(log_std_init=-0.5), network, mask=pre.mask)
    actor.load(policy.get_flat_weights())
    np.testing.assert_array_equal(actor.act(obs, [], EnvStreams(0, list(range(6))), True)[0], actions)
    if pre.mask is not None:  # the learner's forward pass masks as the workers' did
        assert (policy(torch.as_tensor(obs))[0].log_prob(torch.as_tensor(actions)) > -1e30).all()


@pytest.mark.parametrize("network", ["actor_critic", "q"])
def test_a_masked_action_is_never_drawn_in_numpy(network):
    _, policy = build_policy(MASKED_OBS, Discrete(5), ModelConfig(), network)
    if network == "q":
        policy.set_epsilon(1.0)  # every action a uniform draw: among the allowed ones only
    rng = np.random.default_rng(2)
    obs = masked_obs(2000, rng)
    actions = policy.act(obs, [], EnvStreams(0, list(range(2000))), True)[0]
    assert (obs[np.arange(2000), actions] == 1).all()
    allowed_counts = obs[:, :5].sum(1)
    single = allowed_counts == 1  # the one allowed action, every time
    np.testing.assert_array_equal(actions[single], obs[single, :5].argmax(1))


def test_the_mask_is_checked_against_the_action_space():
    with pytest.raises(ConfigError, match=r"^observation key 'action_mask' \(the action mask, action_mask_key\) is "
                                          r"Box\(0\.0, 1\.0, \(4,\), float32\): the mask of Discrete\(5\) is a Box or "
                                          r"MultiBinary of shape \(5,\), one 0/1 entry per action$"):
        find_action_mask(Dict({"action_mask": Box(0.0, 1.0, (4,)), "observations": Box(-1, 1, (2,))}),
                         Discrete(5), "action_mask")
    with pytest.raises(ConfigError, match=r"is Discrete\(2\): the mask of MultiDiscrete\(\[3 2\]\) is a Box or "
                                          r"MultiBinary of shape \(5,\), one 0/1 entry per choice of each part$"):
        find_action_mask(Dict({"action_mask": Discrete(2), "x": Box(-1, 1, (2,))}), MultiDiscrete([3, 2]),
                         "action_mask")
    with pytest.raises(ConfigError, match=r"^an action mask needs discrete actions .*, but the action space is "
                                          r"Box\(-1\.0, 1\.0, \(2,\), float32\)$"):
        find_action_mask(Dict({"action_mask": Box(0.0, 1.0, (2,)), "x": Box(-1, 1, (2,))}),
                         Box(-1.0, 1.0, (2,), np.float32), "action_mask")
    # the mask in the middle of the observation's columns, and a key of the user's choosing
    space = Dict({"a": Box(-1, 1, (2,)), "legal": MultiBinary(3), "z": Discrete(2)})
    found = find_action_mask(space, Discrete(3), "legal")
    assert found is not None and found.mask == slice(2, 5) and list(found.net) == [0, 1, 5, 6]
    assert find_action_mask(space, Discrete(3), "action_mask") is None


def test_mask_problems_name_the_row_and_why():
    layout, acting = action_layout(MultiDiscrete([2, 3])), np.array([True, True])
    assert layout.mask_problem(np.array([[1, 0, 0, 0, 1], [0, 1, 1, 1, 1]], np.float32), acting) is None
    empty = np.array([[1, 0, 0, 0, 1], [0, 0, 1, 1, 1]], np.float32)
    assert layout.mask_problem(empty, acting) == (1, "it allows no action for one of the action's parts")
    assert layout.mask_problem(empty, np.array([True, False])) is None  # a final observation: not acted on
    assert layout.mask_problem(np.array([[1, 0, 0, 0, 1], [1, 0.5, 0, 0, 1]], np.float32), acting) == (
        1, "an action mask holds 0 and 1 (False and True) only")
    assert action_layout(Discrete(3)).mask_problem(np.array([[0, 0, 1], [0, 0, 0]]), acting) == (
        1, "it allows no action")


def test_rllibs_torch_wrappers_are_torch_distributions():
    logits, other = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 2.0]]), torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    ours, ref = TorchCategorical(logits), torch.distributions.Categorical(logits=logits)
    actions = torch.tensor([2, 1])
    torch.testing.assert_close(ours.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    torch.testing.assert_close(ours.kl(TorchCategorical(other)),
                               torch.distributions.kl_divergence(ref, torch.distributions.Categorical(logits=other)))
    assert ours.deterministic_sample().tolist() == [0, 2]
    assert TorchCategorical.required_model_output_shape(Discrete(3), {}) == 3
    inputs = torch.tensor([[0.5, -1.0, 0.2, -0.4]])
    gaussian = TorchDiagGaussian(inputs, None)
    normal = torch.distributions.Normal(torch.tensor([[0.5, -1.0]]), torch.tensor([[0.2, -0.4]]).exp())
    torch.testing.assert_close(gaussian.logp(torch.zeros(1, 2)), normal.log_prob(torch.zeros(1, 2)).sum(-1))
    torch.testing.assert_close(gaussian.entropy(), normal.entropy().sum(-1))
    assert TorchDiagGaussian.required_model_output_shape(Box(-1, 1, (2, 3)), {}) == 12


def test_a_custom_distribution_draws_from_the_workers_own_generator():
    """A custom distribution's draws are a function of the run's seed, carried from step to step,
    and leave torch's global generator as it was: in numpy from each environment's stream where it
    traces (volley.traced_dists, as this one does), else in torch from a generator each worker
    keeps, seeded by the run's seed and its first environment."""
    import action_spaces  # noqa: F401  (registers the autoregressive model and distribution)

    model = ModelConfig(custom_model="autoregressive_model", custom_action_dist="binary_autoreg_dist")
    _, policy = build_policy(Discrete(2), Tuple([Discrete(2), Discrete(2)]), model)
    obs = np.eye(2, dtype=np.float32)[[0, 1, 1, 0] * 25]

    def draws(seed: int) -> np.ndarray:
        streams = EnvStreams(seed, list(range(100)))
        return np.stack([policy.act(obs, [], streams, True)[0] for _ in range(3)])

    torch.manual_seed(123)
    outside = torch.get_rng_state()
    first = draws(0)
    assert torch.equal(torch.get_rng_state(), outside)  # the global generator as it was
    assert first.shape == (3, 100, 2) and first.dtype == np.int64
    np.testing.assert_array_equal(draws(0), first)  # a function of the seed
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(draws(1), first)
    actions, inputs = policy.act(obs, [], EnvStreams(0, list(range(100))), True)[:2]
    with torch.no_grad():
        want = policy.distribution_of(torch.as_tensor(inputs)).log_prob(torch.as_tensor(actions)).numpy()
    np.testing.assert_allclose(policy.log_prob(inputs[None], actions[None])[0], want, rtol=1e-6)
    mode = policy.act(obs[:2], [], EnvStreams(0, [0, 1]), False)[0]
    assert mode.shape == (2, 2)  # deterministic_sample(), flattened as the batch holds actions


@pytest.mark.parametrize("case", ["masked", "nested", "custom_dist"])
def test_a_checkpoint_restores_the_policy_of_every_action_space(case, tmp_path):
    import action_spaces

    if case == "masked":
        config = action_spaces.load_example("action_masking").config("ppo").training(train_batch_size=200,
                                                                                     minibatch_size=50)
    elif case == "nested":
        config = action_spaces.load_example("multidiscrete_actions").config("nested", 0).training(
            train_batch_size=200, minibatch_size=50)
    else:
        config = PPOConfig().environment("correlated_actions").training(
            train_batch_size=200, minibatch_size=50,
            model={"custom_model": "autoregressive_model", "custom_action_dist": "binary_autoreg_dist"})
    with config.resources(engine="local").rollouts(num_envs_per_worker=2).build() as algo:
        algo.train()
        env = algo.driver_worker().env
        obs = [env.single_observation_space.sample() for _ in range(4)]
        for o in obs if case == "masked" else []:
            o["action_mask"] = np.round(o["action_mask"])
            o["action_mask"][0] = 1.0
        before = [algo.compute_single_action(o) for o in obs]
        path = algo.save(tmp_path / "ckpt")
    with Algorithm.from_checkpoint(path) as restored:
        after = [restored.compute_single_action(o) for o in obs]
        for a, b in zip(before, after, strict=True):
            assert str(a) == str(b)
        if case != "masked":
            return
        assert all(o["action_mask"][a] == 1 for o, a in zip(obs, before, strict=True))
        obs[0]["action_mask"][:] = 0.0
        with pytest.raises(VolleyError, match=r"^compute_single_action: the action mask \[0\. 0\. .* 0\.\] \(observation "
                                              r"key 'action_mask'\): it allows no action$"):
            restored.compute_single_action(obs[0])
