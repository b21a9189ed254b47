"""Where tests find the LoCoMo development file, and a fixture that skips cleanly when it is absent.

The file is never part of the project: it lives at ``../shared/data/locomo/locomo10-dev.json`` next to
the repository, or wherever ``MEMUPDATE_LOCOMO_FILE`` points.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEV_FILE = REPO_ROOT.parent / "shared/data/locomo/locomo10-dev.json"
ENV_VAR = "MEMUPDATE_LOCOMO_FILE"


def locomo_dev_path() -> Path:
    """``$MEMUPDATE_LOCOMO_FILE`` if set, else the shared development file (which may not exist)."""
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value).expanduser() if value else DEFAULT_DEV_FILE


# Registered as "locomo_dev_file"; the function has another name so tests can import it without shadowing.
@pytest.fixture(scope="session", name="locomo_dev_file")
def locomo_dev_file_fixture() -> Path:
    """Path of an existing LoCoMo file; skips the test (saying where it looked) when there is none."""
    path = locomo_dev_path()
    if not path.is_file():
        pytest.skip(f"LoCoMo dev file not found at {path}; set {ENV_VAR} to a copy of locomo10.json to run this")
    return path
