"""IMPALA's and APPO's slices of RLlib's keys (``IMPALAConfig.RLLIB_KEYS``, which APPO's extends;
the shared ones are in ``volley.rllib_compat``)."""

from __future__ import annotations

from volley.rllib_compat import NO_CALLBACKS
from volley.rllib_keys import RLlibKey, accepted, refused, renamed, same

NO_AGGREGATORS = "the learner's own feeder thread concatenates the fragments into train batches"

IMPALA_KEYS: tuple[RLlibKey, ...] = (
    refused("num_aggregator_actors_per_learner", ("learners",), NO_AGGREGATORS, allowed=(0,), example=2),
    refused("minibatch_size", ("training",), "IMPALA and APPO take one update on each whole train batch "
            "(num_epochs times); lower train_batch_size for smaller steps", allowed=(None,), example=128),
    same("vtrace", "training", example=False),
    same("vtrace_clip_rho_threshold", "training", example=2.0),
    same("vtrace_clip_pg_rho_threshold", "training", example=2.0),
    accepted("vtrace_drop_last_ts", ("training",), "volley never drops a fragment's last step: it bootstraps "
             "from the learner's value of the observation after it", example=True),
    same("broadcast_interval", "training", example=2),
    same("max_requests_in_flight_per_sampler_worker", "training", example=1),
    renamed("max_sample_requests_in_flight_per_worker", "max_requests_in_flight_per_sampler_worker", "training",
            example=1, note=" (RLlib 1.x's name)"),
    same("minibatch_buffer_size", "training", example=4),
    same("replay_proportion", "training", example=0.5),
    same("replay_buffer_num_slots", "training", example=50),
    same("learner_queue_size", "training", example=16),
    accepted("learner_queue_timeout", ("training",), "volley's learner waits for its next batch as long as it "
             "takes; a dead worker is replaced (fault_tolerance)", example=300),
    accepted("timeout_s_sampler_manager", ("training",), "volley takes each fragment the moment it is done",
             example=0.0),
    refused("num_aggregation_workers", ("training",), NO_AGGREGATORS, allowed=(0,), example=2),
    accepted("max_requests_in_flight_per_aggregator_worker", ("training",), f"only used with aggregation "
             f"workers, which volley refuses: {NO_AGGREGATORS}", example=2),
    accepted("timeout_s_aggregator_manager", ("training",), f"only used with aggregation workers, which volley "
             f"refuses: {NO_AGGREGATORS}", example=0.0),
    accepted("num_gpu_loader_threads", ("training",), "the learner moves each train batch to its device itself",
             example=8),
    accepted("num_multi_gpu_tower_stacks", ("training",), "volley's learner trains on one device", example=2),
    same("opt_type", "training", example="rmsprop"),
    same("decay", "training", example=0.9),
    same("epsilon", "training", example=0.01, note=" (RMSProp's; DQN's RLlib epsilon is its ε schedule)"),
    refused("momentum", ("training",), "volley's RMSProp has no momentum", allowed=(0, 0.0), example=0.9),
    refused("_separate_vf_optimizer", ("training",), "one optimizer steps the policy and the value network",
            allowed=(False,)),
    accepted("_lr_vf", ("training",), "only used with _separate_vf_optimizer, which volley refuses",
             example=5e-4),
    refused("after_train_step", ("training",), NO_CALLBACKS, allowed=(None,), example="fn"),
)

# APPO's own, looked up before IMPALA's
APPO_KEYS: tuple[RLlibKey, ...] = (
    same("target_worker_clipping", "training", example=1.5),
    refused("use_critic", ("training",), "APPO always learns a value function for V-trace", allowed=(True,),
            example=False),
    refused("use_gae", ("training",), "APPO's advantages are V-trace's (vtrace=False: n-step returns)",
            allowed=(True,), example=False),
    *[refused(name, ("training",), "V-trace's targets take c-bar = 1 (lambda 1)", allowed=(1.0,), example=0.95)
      for name in ("lambda_", "lambda")],
    renamed("target_update_frequency", "target_network_update_freq", "training", example=4,
            note=" (RLlib's old name)"),
    accepted("use_circular_buffer", ("training",), "volley's minibatch buffer trains each batch num_epochs "
             "times, in turn with minibatch_buffer_size - 1 others", example=False),
    renamed("circular_buffer_num_batches", "minibatch_buffer_size", "training", example=4,
            note=" (RLlib draws from its circular buffer at random; volley trains the batches in turn)"),
    renamed("circular_buffer_iterations_per_batch", "num_epochs", "training", example=2),
    accepted("simple_queue_size", ("training",), "only used with use_circular_buffer=False; volley's queue "
             "is learner_queue_size", example=32),
)
