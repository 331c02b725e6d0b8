"""Checkpoints: atomic, verified, never unpickled."""

import json
import re

import pytest
import torch

from volley import CheckpointError, PGConfig, PPOConfig
from volley.algorithm import Algorithm
from volley.checkpoint import MANIFEST, TENSORS, read_checkpoint, write_checkpoint


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    config = (PPOConfig().environment("CartPole-v1", observation_filter="MeanStdFilter")
              .resources(engine="local").training(train_batch_size=512, minibatch_size=128, num_epochs=2)
              .rollouts(num_envs_per_worker=4))
    algo = config.build()
    for _ in range(3):
        algo.train()
    path = algo.save(tmp_path_factory.mktemp("ckpt") / "ckpt")
    yield algo, path
    algo.stop()


def _weights(algo):
    return {k: v.clone() for k, v in algo.policy.state_dict().items()}


def test_restore_continues_from_saved_counters_filter_and_weights(trained):
    algo, path = trained
    restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.iteration == algo.iteration == 3
        assert restored.timesteps_total == algo.timesteps_total
        assert restored.episodes_total == algo.episodes_total
        for key, value in _weights(algo).items():
            assert torch.equal(restored.policy.state_dict()[key], value), key
        assert restored.obs_filter.stats.count == algo.obs_filter.stats.count
        assert (restored.obs_filter.stats.mean == algo.obs_filter.stats.mean).all()
        opt_a, opt_b = algo.optimizer.state_dict(), restored.optimizer.state_dict()
        for index, entries in opt_a["state"].items():
            for key, value in entries.items():
                assert torch.equal(torch.as_tensor(opt_b["state"][index][key]), torch.as_tensor(value))
        assert restored.rng.bit_generator.state == algo.rng.bit_generator.state
        result = restored.train()
        assert result["training_iteration"] == 4
        assert result["timesteps_total"] > algo.timesteps_total
    finally:
        restored.stop()


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"no checkpoint at '.*nothing-here'"):
        Algorithm.from_checkpoint(tmp_path / "nothing-here")
    with pytest.raises(CheckpointError, match=r"not a volley checkpoint"):
        Algorithm.from_checkpoint(tmp_path)


def test_corrupt_tensor_file_fails_checksum(trained, tmp_path):
    _, path = trained
    copy = tmp_path / "copy"
    write_checkpoint(copy, *_reload(path))
    data = bytearray((copy / TENSORS).read_bytes())
    data[-1] ^= 0xFF
    (copy / TENSORS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"'tensors.safetensors' fails its SHA-256 check"):
        read_checkpoint(copy)


def test_corrupt_manifest_and_newer_format(trained, tmp_path):
    _, path = trained
    copy = tmp_path / "copy"
    write_checkpoint(copy, *_reload(path))
    (copy / MANIFEST).write_text("{not json")
    with pytest.raises(CheckpointError, match=r"is corrupt: its manifest cannot be read"):
        read_checkpoint(copy)
    write_checkpoint(copy, *_reload(path))
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["format_version"] = 99
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"format version 99"):
        read_checkpoint(copy)


def test_checkpoint_of_another_algorithm(trained, tmp_path):
    _, path = trained
    pg = PGConfig().environment("CartPole-v1").resources(engine="local").build()
    try:
        with pytest.raises(CheckpointError, match=re.escape(f"checkpoint '{path}' holds a PPO algorithm, not PG")):
            pg.restore(path)
    finally:
        pg.stop()
    tensors, manifest = _reload(path)
    write_checkpoint(tmp_path / "copy", tensors, {**manifest, "algorithm": "A3C"})
    with pytest.raises(CheckpointError, match=r"checkpoint '.*copy' cannot be loaded: unknown algorithm 'A3C'"):
        Algorithm.from_checkpoint(tmp_path / "copy")


def test_overwrite_is_atomic_and_leaves_no_temporaries(trained, tmp_path):
    algo, _ = trained
    target = tmp_path / "ckpt"
    algo.save(target)
    algo.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    read_checkpoint(target)


def test_no_pickle_in_checkpoint(trained):
    _, path = trained
    from pathlib import Path
    names = sorted(p.name for p in Path(path).iterdir())
    assert names == [TENSORS, MANIFEST]


def _reload(path):
    tensors, manifest = read_checkpoint(path)
    manifest = {k: v for k, v in manifest.items() if k not in ("format_version", "volley_version", "files")}
    return tensors, manifest


def test_tensors_that_share_memory_are_stored_each_in_full(tmp_path):
    """Two policies' models share a layer (RLlib's shared_weights_model, in multi_agent_cartpole.py):
    safetensors refuses shared memory, so each name is written with a copy of its own."""
    layer = torch.nn.Linear(3, 2)
    tensors = {"policies.a.shared.weight": layer.weight, "policies.b.shared.weight": layer.weight,
               "policies.b.own": torch.arange(4.0)[1:]}  # a view into memory of its own
    write_checkpoint(tmp_path / "checkpoint", tensors, {})
    read, _ = read_checkpoint(tmp_path / "checkpoint")
    assert sorted(read) == sorted(tensors)
    for name, tensor in tensors.items():
        assert torch.equal(read[name], tensor.detach())
