"""Test-wide settings: quiet TensorFlow, and deterministic hypothesis profiles."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "refold", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("refold")
