"""A learning run's folder, whatever the task: each stage's result recorded in `stages.json` as the stage
finishes (with its seconds and the machine's load), read back on a rerun so the run resumes where it
stopped, and the run's report, `metrics.json` and `learning_curve.png`, written in one place.

    folder = RunFolder.open("runs/x")
    keys = folder.stage("teacher-groups", lambda: ...)   # computed once; a rerun of the command reads it back
    folder.report(metrics, plot_learning_curve)          # metrics.json, and learning_curve.png drawn from it

A stage's result must be JSON (what `stages.json` holds); a stage that writes more (checkpoints, logs)
writes it under `out` and returns where.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STAGES = "stages.json"
METRICS = "metrics.json"
LEARNING_CURVE = "learning_curve.png"


@dataclass
class RunFolder:
    """The run folder `out` and its finished stages, by name: `{"result", "seconds", "load"}` (a record
    written before the load was kept has none)."""

    out: Path
    done: dict[str, Any]

    @classmethod
    def open(cls, out: str | Path) -> RunFolder:
        """The folder `out` (made if missing) with the stages an earlier run of it finished."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        return cls(out, json.loads((out / STAGES).read_text()) if (out / STAGES).is_file() else {})

    def stage(self, name: str, fn: Callable[[], Any]) -> Any:
        """`fn()`'s result, recorded in `stages.json` when it finishes; a finished stage is read back."""
        if name not in self.done:
            started = time.perf_counter()
            result = fn()
            self.done[name] = {"result": result, "seconds": round(time.perf_counter() - started, 1), "load": machine_load()}
            (self.out / STAGES).write_text(json.dumps(self.done, indent=1))
            release_memory()
        return self.done[name]["result"]

    def report(self, metrics: dict[str, Any], draw: Callable[[dict[str, Any], Path], None]) -> dict[str, Any]:
        """Write `metrics` to `metrics.json` and `draw` the learning curve from them; returns `metrics`."""
        (self.out / METRICS).write_text(json.dumps(metrics, indent=2))
        draw(metrics, self.out / LEARNING_CURVE)
        return metrics


def release_memory() -> None:
    """Hand the heap a finished stage freed back to the system (glibc keeps it otherwise): a training
    stage's peak and the next evaluation's added up past 24 GB in one process."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def machine_load() -> float:
    """The 1-minute load average: a stage's seconds read beside it (the cores are shared)."""
    return round(os.getloadavg()[0], 2)
