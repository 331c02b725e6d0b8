"""The Ray cluster ``volley train`` begins in the background is the one the run uses, and none is left behind.

Each check runs in a fresh interpreter: the other engine tests share one Ray session in this
process, and a background start only happens where Ray is not up yet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, threading, time
    import ray
    from ray._private import services
    from volley import PPOConfig
    from volley.engines import ray_boot, ray_reaper

    LOOKUP = getattr(services, "get_node", None)  # Ray 2.60's lookup; Ray 2.9 has none

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
    # the quicker wait for the raylet finds a live one and gives up on an unknown one; Ray's
    # own lookup is back in place once ray.init has returned
    if LOOKUP is not None:
        context = ray.get_runtime_context()
        assert ray_boot._await_raylet(context.gcs_address, context.get_node_id())
        assert not ray_boot._await_raylet(context.gcs_address, "ab" * 28, timeout_s=0.1)
        assert services.get_node is LOOKUP
    cluster = ray_reaper.children(os.getpid())  # GCS, raylet, monitor, dashboard, ...
    assert len(cluster) >= 4, cluster
    algo.stop()
    assert not ray.is_initialized()
    assert not cluster & ray_reaper.children(os.getpid()), "the cluster's processes outlived stop()"
    # Ray adds the session's keys to the _system_config it is given; volley's own stays as it was
    assert ray_boot.QUICK_CONNECT == {"raylet_client_connect_timeout_milliseconds": 20,
                                      "raylet_client_num_connect_attempts": 500}, ray_boot.QUICK_CONNECT
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


# `volley train` imports torch (1 to 2 s here) only after it has begun Ray's cluster, so the two
# overlap: a module-level import of torch on the way to ray_boot.begin() would undo that
TRAIN = textwrap.dedent("""
    import sys
    from volley import cli
    from volley.engines import ray_boot

    begin = ray_boot.begin
    seen = []

    def recording_begin(settings):
        seen.append("torch" in sys.modules)
        begin(settings)

    ray_boot.begin = recording_begin
    code = cli.main(["train", "--engine", "ray", "--workers", "1", "--num-cpus", "1", "--max-iters", "1",
                     "--logdir", sys.argv[1], "--no-tensorboard"])
    print("torch imported before the cluster began:", seen)
    sys.exit(code)
""")


def test_volley_train_begins_the_cluster_before_importing_torch(tmp_path):
    out = subprocess.run([sys.executable, "-c", TRAIN, str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "torch imported before the cluster began: [False]" in out.stdout, out.stdout + out.stderr
