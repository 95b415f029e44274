"""Hypothesis profiles for the unit suite.

`ci` (the default) is derandomized, so CI sees the same examples on every run. For a deeper
local search: HYPOTHESIS_PROFILE=deep pytest tests/unit
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=120, derandomize=True, deadline=None)
settings.register_profile("deep", max_examples=3000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
