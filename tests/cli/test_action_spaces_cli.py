"""Masks, action spaces and custom action distributions that do not fit: one line naming the
value, exit 2, no traceback (``volley train --import action_spaces``: tests/action_spaces.py)."""

from __future__ import annotations

import json

import pytest

from volley.cli import main


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


def odd_masks(kind: str) -> list[str]:
    return ["--env", "odd_masks", "--set", f"env_config={json.dumps({'kind': kind})}"]


AUTOREGRESSIVE = ["--env", "correlated_actions", "--set", "gamma=0.5"]


@pytest.mark.parametrize(("args", "message"), [
    (odd_masks("short"), "volley train: error: observation key 'action_mask' (the action mask, action_mask_key) is "
                         "Box(0.0, 1.0, (3,), float32): the mask of Discrete(4) is a Box or MultiBinary of shape "
                         "(4,), one 0/1 entry per action"),
    (odd_masks("half"), "volley train: error: environment 'odd_masks' (worker 0, env index 0) gave the action mask "
                        "[0.5 0.5 0.5 0.5] (observation key 'action_mask') at step 0 of its episode: an action mask "
                        "holds 0 and 1 (False and True) only"),
    (odd_masks("none"), "volley train: error: environment 'odd_masks' (worker 0, env index 0) gave the action mask "
                        "[0. 0. 0. 0.] (observation key 'action_mask') at step 2 of its episode: it allows no action"),
    (odd_masks("method_short"), "volley train: error: environment 'odd_masks'.action_masks() returned bool of shape "
                                "(3,): the mask of Discrete(4) holds 4 True/False (or 1/0) values"),
    (odd_masks("method_text"), "volley train: error: environment 'odd_masks'.action_masks() returned <U3 of shape "
                               "(4,): the mask of Discrete(4) holds 4 True/False (or 1/0) values"),
    (odd_masks("text_actions"), "volley train: error: in Tuple(Discrete(2), Text(1, 4, charset=0123456789ABCDEFGHIJ"
                                "KLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz)), the part [1]: action space Text(1, 4, "),
    ([*AUTOREGRESSIVE, "--set", 'model={"custom_model": "fixed_context_model", "custom_action_dist": '
      '"binary_autoreg_dist"}'],
     "volley train: error: custom model FixedContextModel returned outputs of shape (2, 8): expected (2, 16), what "
     "custom action dist BinaryAutoregressiveDist requires (required_model_output_shape)"),
    ([*AUTOREGRESSIVE, "--set", 'model={"custom_model": "autoregressive_model", "custom_action_dist": '
      '"matrix_shape_dist"}'],
     "volley train: error: custom action dist MatrixShapeDist.required_model_output_shape() returned (3, 4): the "
     "model's outputs are [B, n], so it must be one positive int n"),
    ([*AUTOREGRESSIVE, "--set", 'model={"custom_action_dist": "binary_autoreg_dist"}'],  # volley's own network
     "volley train: error: custom action dist BinaryAutoregressiveDist failed on the model's outputs of shape "
     "(2, 16) (its required_model_output_shape): AttributeError: 'ActorCritic' object has no attribute "
     "'action_module'"),
    ([*AUTOREGRESSIVE, "--set", 'model={"custom_action_dist": "binary_autoreg_dsit"}'],
     "volley train: error: unknown custom action dist 'binary_autoreg_dsit'; did you mean 'binary_autoreg_dist'?"),
    (["--algo", "dqn", *AUTOREGRESSIVE, "--set", 'model={"custom_action_dist": "binary_autoreg_dist"}'],
     "volley train: error: custom_action_dist 'binary_autoreg_dist' is for PPO, PG and TRPO: DQN and Ape-X act "
     "ε-greedily on their Q-values"),
])
def test_a_mask_space_or_distribution_that_does_not_fit_is_one_line(args, message, capsys, tmp_path):
    code, err = run_main(["train", "--import", "action_spaces", "--engine", "local", "--max-iters", "1",
                          "--no-tensorboard", "--logdir", str(tmp_path), *args], capsys)
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
