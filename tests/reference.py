"""What the engine tests share: the local engine is the reference every other engine equals."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from volley import Algorithm


def assert_samples_and_updates_equal(local: Algorithm, remote: Algorithm,
                                     check: Callable[[dict], None] | None = None) -> None:
    """Two batches (the second after an update: the weights each engine ships) equal column by column,
    and so the weights after both updates; ``check`` looks at each local batch too. Stops both."""
    try:
        for _ in range(2):
            a, b = local.sample(), remote.sample()
            if check is not None:
                check(a)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            local.update(a)
            remote.update(b)
        np.testing.assert_array_equal(local.policy.get_flat_weights(), remote.policy.get_flat_weights())
    finally:
        local.stop()
        remote.stop()
