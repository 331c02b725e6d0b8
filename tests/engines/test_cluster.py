"""Multi-node placement and joining a running cluster. Each runs in its own process and Ray."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

CLUSTER_SCRIPT = """
import json, ray
from ray.cluster_utils import Cluster
from volley import PPOConfig
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
algo = (PPOConfig().environment("CartPole-v1").resources(engine="ray", ray_address=cluster.address)
        .rollouts(num_workers=2, num_envs_per_worker=2)
        .training(train_batch_size=200, minibatch_size=50, num_epochs=1).build())
result = algo.train()
print(json.dumps({"nodes": algo.workers.node_ids(), "steps": result["timesteps_total"]}))
algo.stop()
ray.shutdown()
cluster.shutdown()
"""


def test_two_node_cluster_places_workers_on_different_nodes():
    out = subprocess.run([sys.executable, "-c", CLUSTER_SCRIPT], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(set(report["nodes"])) == 2
    assert report["steps"] > 150  # 200 less the reset steps after episode ends


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_joins_a_running_ray_head(tmp_path):
    port = _free_port()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        volley = os.path.join(os.path.dirname(sys.executable), "volley")
        deadline = time.time() + 120
        while True:  # the head takes a few seconds to accept drivers
            out = subprocess.run([volley, "train", "--address", f"127.0.0.1:{port}", "--workers", "2",
                                  "--envs-per-worker", "2", "--max-iters", "2", "--no-tensorboard",
                                  "--logdir", str(tmp_path)], capture_output=True, text=True, timeout=180)
            if out.returncode == 0 or time.time() > deadline:
                break
            time.sleep(2)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        assert "stopped (reached 2 iterations)" in out.stdout
    finally:
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            pytest.fail("ray head did not stop")
