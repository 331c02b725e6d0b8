"""The Ray cluster ``volley train`` begins in the background is the one the run uses, and none is left behind.

Each check runs in a fresh interpreter: the other engine tests share one Ray session in this
process, and a background start only happens where Ray is not up yet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import threading, time
    import ray
    from volley import PPOConfig
    from volley.engines import ray_boot

    def boot_threads():
        return [t for t in threading.enumerate() if t.name == "volley-ray-start"]

    def build(num_cpus):
        return (PPOConfig().environment("CartPole-v1")
                .update(engine="ray", num_workers=1, num_cpus=num_cpus, train_batch_size=64,
                        minibatch_size=32).build())

    # taken: the run uses the cluster begun for it, and stopping the run ends the thread
    ray_boot.begin({"num_cpus": 1})
    algo = build(1)
    assert algo.workers.started_ray and ray.cluster_resources()["CPU"] == 1
    assert len(boot_threads()) == 1
    algo.train()
    algo.stop()
    assert not ray.is_initialized()
    time.sleep(0.2)
    assert boot_threads() == [], boot_threads()

    # begun for other settings: shut down and started again as the config asks
    ray_boot.begin({"num_cpus": 1})
    algo = build(2)
    assert ray.cluster_resources()["CPU"] == 2, ray.cluster_resources()
    algo.stop()

    # not taken (the run failed before it needed Ray): abandon() shuts it down
    ray_boot.begin({})
    ray_boot.abandon()
    assert not ray.is_initialized()
    time.sleep(0.2)
    assert boot_threads() == [], boot_threads()
    print("ok")
""")


def test_background_cluster_is_taken_restarted_or_shut_down():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")
