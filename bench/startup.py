"""Start-up of the commands that need no model: `memupdate review`, `history`, `history --change N`,
`undo --change N` and an idle `watch --once`, each run as a person runs it (a fresh process).

Targets, on an idle machine: `review`, `history`, `undo` under 2 s; an idle `watch --once` under
4 s. Each command runs `--repeats` times against a bank of 12 memories (4 pairs of near-duplicates, so the
first pass applies merges that `undo --change N` then reverts one by one), with the embedded server held
by this process (as a running watcher or app holds it). One more `review` runs against a server that is
not running (it starts and stops it: the cost of the embedded server itself). Wall seconds are
reported with the CPU seconds of the command (user + system, its children included) and the load
average: on a shared machine the wall time is mostly waiting, the CPU time is what an idle machine pays.
A command that loads torch or the embedding model shows it at once (several CPU seconds).

    python -m memupdate.bench.startup [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from memupdate.bench.common import bench_main, console, print_table, verdict

TARGETS = {"review": 2.0, "history": 2.0, "history --change": 2.0, "undo --change": 2.0, "watch --once (idle)": 4.0}
FACTS = [
    "Alice moved to Lisbon in 2021", "Alice has a dog called Rex", "Alice works as a nurse at the city hospital",
    "Alice plays the cello in a quartet",
]
OTHERS = ["Alice likes green tea", "Alice is learning Portuguese", "Alice reads crime novels", "Alice runs on Sundays"]


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command (undo: at most 4)")


def _command(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run `memupdate ARGS` in a fresh process: (wall seconds, CPU seconds, stdout); fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memupdate.cli", *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"memupdate {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memupdate.bank.change_log import history
    from memupdate.migrations.schema import upgrade
    from memupdate.store import (
        MemoryStore,
        NewMemory,
        get_embedder,
        get_engine,
        start_embedded_server,
        temporary_data_dir,
    )

    env = dict(os.environ)
    if args.url:
        env["MEMUPDATE_DATABASE_URL"] = args.url
        engine = get_engine(args.url)
    else:  # this process holds the server for the whole run, as a running app or watcher would
        data_dir = Path(args.data_dir) if args.data_dir else temporary_data_dir("memupdate-startup-")
        env["MEMUPDATE_DATA_DIR"] = str(data_dir)
        engine = get_engine(start_embedded_server(data_dir))
    upgrade(engine)
    root = ("bench-startup", uuid.uuid4().hex[:8])
    bank = MemoryStore(engine, get_embedder(), (*root, "alice"))
    bank.create_many([NewMemory(text) for text in [*FACTS, *(f + "." for f in FACTS), *OTHERS]])
    path, root_path = bank.path, "/".join(root)
    with console.status("the first pass (compacts the bank: loads the model, not timed) ..."):
        _command(["watch", root_path, "--once"], env)
    merges = [c.id for c in history(bank) if c.status == "applied"]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in TARGETS}
    for i in range(args.repeats):
        with console.status(f"round {i + 1} of {args.repeats} ..."):
            runs["review"].append(_command(["review"], env)[:2])
            runs["history"].append(_command(["history", path], env)[:2])
            runs["history --change"].append(_command(["history", path, "--change", str(merges[0])], env)[:2])
            if i < len(merges):
                runs["undo --change"].append(_command(["undo", path, "--change", str(merges[i])], env)[:2])
            runs["watch --once (idle)"].append(_command(["watch", root_path, "--once"], env)[:2])
    cold = None
    if not args.url:  # a data dir whose server is not running: the command starts it and stops it
        other = temporary_data_dir("memupdate-startup-cold-")
        cold_env = {**env, "MEMUPDATE_DATA_DIR": str(other)}
        _command(["db", "upgrade"], cold_env)
        cold = _command(["review"], cold_env)[:2]
    for namespace in bank.list_namespaces(prefix=root):  # the bank and its compactions' forks
        bank.scoped(namespace).drop()
    rows = {}
    for name, measured in runs.items():
        walls, cpus = [w for w, _ in measured], [c for _, c in measured]
        rows[name] = {"wall_s": round(statistics.median(walls), 2), "cpu_s": round(statistics.median(cpus), 2),
                      "runs": len(measured), "target_s": TARGETS[name], "cpu_within_target": statistics.median(cpus) < TARGETS[name]}
    return {"commands": rows, "review_starting_the_server": cold and {"wall_s": round(cold[0], 2), "cpu_s": round(cold[1], 2)},
            "load_average": [round(x, 2) for x in os.getloadavg()], "cores": os.cpu_count()}


def report(summary: dict[str, Any]) -> None:
    rows = [[name, f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", f"{r['target_s']:.0f}", verdict(r["cpu_within_target"]), str(r["runs"])]
            for name, r in summary["commands"].items()]
    notes = [f"load average {summary['load_average']} on {summary['cores']} cores: wall time there is mostly waiting; "
             "the target is judged on the CPU seconds (what an idle machine pays)."]
    if cold := summary["review_starting_the_server"]:
        notes.append(f"review that starts and stops the embedded server itself: {cold['wall_s']:.2f} s wall, {cold['cpu_s']:.2f} s CPU")
    print_table("start-up of the commands that need no model (median, fresh process each run)",
                ["command", "wall s", "CPU s", "target s", "CPU within it", "runs"], rows, notes)


def main(argv: list[str] | None = None) -> None:
    bench_main("startup", __doc__, run, report, argv, options=_options)


if __name__ == "__main__":
    main()
