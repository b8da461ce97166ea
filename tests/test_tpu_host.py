"""The suite on a TPU VM (where users run `local run` and these tests): what jax says about the host when it is
imported is not a fault of the code under test, and must not fail it under `filterwarnings = error`. jax's own
code runs here, with the host it reads stood in for, so the suite's filters are proved without a TPU."""

from __future__ import annotations

import pytest


def test_jaxs_warning_of_a_tpu_host_without_transparent_hugepages_is_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a TPU v5e (or newer) host whose kernel leaves transparent hugepages off, `import jax` warns
    (jax/_src/cloud_tpu_init.py); as an error the warning aborted jax's TPU set-up and every test importing jax
    failed. Measured on a TPU v5e VM: `python -W error -c 'import jax'` fails there with "cloud_tpu_init failed"."""
    from jax._src import cloud_tpu_init, hardware_utils

    v5e = hardware_utils.TpuVersion.v5e
    monkeypatch.setattr(hardware_utils, "num_available_tpu_chips_and_device_id", lambda: (0, v5e))
    monkeypatch.setattr(hardware_utils, "transparent_hugepages_enabled", lambda: False)
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")  # what jax sets for a host without chips; restored after
    with pytest.warns(UserWarning, match="Transparent hugepages are not enabled"):
        cloud_tpu_init.cloud_tpu_init()  # jax's own code reaches the warning with this host
    cloud_tpu_init.cloud_tpu_init()  # under the suite's own filters: not an error
