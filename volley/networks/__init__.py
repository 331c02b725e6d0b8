"""One module per network kind: the layout of its flat weights and its numpy twin (what a rollout
worker acts with, torch-free), registered once in :mod:`volley.networks.registry`; shared numpy
layers in :mod:`volley.networks.numpy_layers`. Their torch networks are the modules of the same
names in :mod:`volley.torch_networks`, a package apart, so that nothing here imports torch;
``tests/unit/test_network_twins.py`` holds each twin equal to its torch network."""
