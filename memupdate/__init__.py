"""memupdate: an agent that edits a long-term memory database, trained with reinforcement learning."""

import os

# memupdate shares its cores (a watcher beside the app it serves, a judge beside a training run): torch's
# OpenMP threads that spin while they wait made the judge 3-4x slower whenever another process held a
# core (1-minute load 4-7 on 2 cores). Read when torch loads; a value set by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
