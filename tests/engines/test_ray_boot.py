"""The Ray cluster ``volley train`` (or ``config.build()``) begins in the background is the one the run
uses, and none is left behind.

Each check runs in a fresh interpreter: the other engine tests share one Ray session in this
process, and a background start only happens where Ray is not up yet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    from volley import PPOConfig, register_env
    assert "torch" not in sys.modules  # so build() can start the cluster before torch loads
    import ray
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

    # config.build() begins the start itself (in the background thread), and a build that
    # fails leaves no cluster behind
    algo = build(1)
    assert algo.workers.started_ray and len(boot_threads()) == 1
    algo.stop()

    def broken(env_config):
        raise RuntimeError("no such robot")

    register_env("Broken-v0", broken)
    try:
        PPOConfig().environment("Broken-v0").update(engine="ray", num_workers=1, num_cpus=1).build()
        raise AssertionError("built an algorithm whose environment cannot be made")
    except Exception as exc:
        assert "no such robot" in str(exc), exc
    time.sleep(0.2)
    assert not ray.is_initialized() and boot_threads() == [], boot_threads()

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
