"""Multi-node placement, a removed node, and joining a running cluster. Each runs in its own
process and Ray."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest


def run_on_two_nodes(head_cpus: int, then: str) -> dict:
    """Run PPO with 2 workers on a two-node ``Cluster`` (head: ``head_cpus`` CPUs, the other 1) in a
    new process, run the code ``then``, and return the JSON object it prints."""
    script = f"""
import json, ray
from ray.cluster_utils import Cluster
from volley import PPOConfig
cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": {head_cpus}}})
worker_node = cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
algo = (PPOConfig().environment("CartPole-v1").resources(engine="ray", ray_address=cluster.address)
        .rollouts(num_workers=2, num_envs_per_worker=2)
        .training(train_batch_size=200, minibatch_size=50, num_epochs=1).build())
{then}
algo.stop()
ray.shutdown()
cluster.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_node_cluster_places_workers_on_different_nodes():
    report = run_on_two_nodes(1, """
result = algo.train()
print(json.dumps({"nodes": algo.workers.node_ids(), "steps": result["timesteps_total"]}))""")
    assert len(set(report["nodes"])) == 2
    assert report["steps"] > 150  # 200 less the reset steps after episode ends


def test_removed_node_workers_are_replaced_on_the_remaining_node():
    report = run_on_two_nodes(2, """
before = algo.workers.node_ids()
algo.train()
cluster.remove_node(worker_node)
result = algo.train()
head = ray.get_runtime_context().get_node_id()  # the driver's node
print(json.dumps({"before": before, "after": algo.workers.node_ids(), "head": head,
                  "restarts": result["num_worker_restarts"], "steps": result["timesteps_this_iter"]}))""")
    assert len(set(report["before"])) == 2
    assert report["after"] == [report["head"]] * 2  # the replacement runs on the head node
    assert report["restarts"] == 1
    assert report["steps"] > 150  # both workers' shares: 200 less the reset steps


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
