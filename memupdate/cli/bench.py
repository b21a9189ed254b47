"""`memupdate bench`: every benchmark figure from one command.

    memupdate bench all --out bench.json --plot cost.png      # store, tools, reward, rollouts, student (~20 min)
    memupdate bench store --sizes 200,5000                    # one benchmark, smaller
    memupdate bench reward
    memupdate bench compactor                                 # memupdate watch: memories/s, the app's write latency
    memupdate bench factconsolidation --plot fc-scale.png     # 2,000-18,000 facts compacted, judge and rule, now/baseline
    memupdate bench watch --plot watch-scale.png              # watch --once over 100-1,000 people, now/baseline
    memupdate bench dev_banks --baseline 07cbdca              # the dev banks: the same changes as that commit's
    memupdate bench judge                                     # the relation judge: ms a pair against the rule

`factconsolidation`, `watch` and `dev_banks` measure today's code beside a baseline commit's (`--baseline`,
default `bench.baseline.BASELINE_COMMIT`; `none`: today's alone), each in a git worktree of its own.

The benchmarks live in the top-level `bench/` folder, importable as `memupdate.bench`; each also runs
alone as `python -m memupdate.bench.<name>`. `all` runs them on one embedded server (or `--url`), and its JSON records
the machine (CPU, cores, AVX-512, load average at the start and the end, date) for `python -m memupdate.bench.page`,
which writes docs/benchmarks.md from it (`make bench` does both).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console

console = Console()


class Benchmark(StrEnum):
    store = "store"
    tools = "tools"
    reward = "reward"
    rollouts = "rollouts"
    student = "student"
    compactor = "compactor"
    factconsolidation = "factconsolidation"
    watch = "watch"
    dev_banks = "dev_banks"
    startup = "startup"
    judge = "judge"
    all = "all"


# `compactor` (memupdate watch; about 7 min on a shared 2-core machine), `factconsolidation` (banks up to 18,000
# facts, each compacted four ways; needs the FactConsolidation file; about an hour), `watch` (up to 1,000 people x
# 20 memories, both paths; about 30 min) and `dev_banks` run only when named.
ORDER = ["store", "tools", "reward", "rollouts", "student"]
# Benchmarks that draw their time against size with --plot (the store draws its cost curve).
PLOTTED = ("factconsolidation", "watch")
# Benchmarks that measure a baseline commit beside today's code (`bench.baseline`).
BASELINED = ("factconsolidation", "watch", "dev_banks")


def load_benchmark(name: str):
    """The module `memupdate.bench.<name>`, or None when there is none of that name."""
    if importlib.util.find_spec(f"memupdate.bench.{name}") is None:
        return None
    return importlib.import_module(f"memupdate.bench.{name}")


def machine() -> dict[str, object]:
    """What the figures were measured on, for `memupdate.bench.page`'s header; unknown fields are None.

        >>> sorted(machine())
        ['avx512', 'cores', 'cpu', 'date', 'load_start', 'memory_gb', 'platform', 'python']
    """
    cpu, flags, memory_gb = platform.processor() or None, None, None
    cpuinfo, meminfo = Path("/proc/cpuinfo"), Path("/proc/meminfo")
    if cpuinfo.is_file():  # Linux: the model name and the instruction-set flags of the first core
        fields = dict(line.split(":", 1) for line in cpuinfo.read_text().splitlines() if ":" in line)
        fields = {key.strip(): value.strip() for key, value in fields.items()}
        cpu, flags = fields.get("model name", cpu), fields.get("flags", "").split() or None
    if meminfo.is_file():
        total_kb = next((line.split()[1] for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:")), None)
        memory_gb = round(int(total_kb) / 1024**2, 1) if total_kb else None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "avx512": None if flags is None else "avx512f" in flags,
        "memory_gb": memory_gb,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def bench_command(
    which: Benchmark = typer.Argument(Benchmark.all, help="the benchmark to run, or all of them"),
    as_json: bool = typer.Option(False, "--json", help="print every result as JSON to stdout (the tables go to stderr)"),
    json_out: Path | None = typer.Option(None, "--out", help="write every result to this JSON file"),
    plot: Path | None = typer.Option(None, "--plot", help="draw the store's cost curve (search, fork) to this PNG"),
    url: str | None = typer.Option(None, "--url", help="postgresql://... of a server instead of the embedded one"),
    sizes: str = typer.Option("200,5000,100000", help="the store benchmark's sizes, comma-separated"),
    queries: int = typer.Option(200, help="the store benchmark's search queries per size"),
    baseline: str | None = typer.Option(
        None, "--baseline", metavar="COMMIT",
        help=f"the commit {', '.join(BASELINED)} measure beside today's code (default bench.baseline.BASELINE_COMMIT; none: today's alone)"),
) -> None:
    """Run the benchmarks and print their tables (ratios against baselines measured in the same run)."""
    names = ORDER if which is Benchmark.all else [which.value]
    if plot and not {"store", *PLOTTED} & set(names):
        raise typer.BadParameter("--plot draws the store benchmark's cost curve (or the time against size of "
                                 "factconsolidation and watch): run one of them or `bench all`")
    from memupdate.cli.common import json_to_stdout, print_json

    with json_to_stdout(as_json):
        summary = _run(names, json_out, plot, url, sizes, queries, baseline)
    if as_json:
        print_json(summary)


def _run(names: list[str], json_out: Path | None, plot: Path | None, url: str | None, sizes: str, queries: int,
         baseline: str | None = None) -> dict:
    data_dir = None
    if not url:  # one embedded server for every benchmark of the run
        from memupdate.store import temporary_data_dir

        data_dir = temporary_data_dir("memupdate-bench-")
    common = ["--url", url] if url else ["--data-dir", str(data_dir)]
    host = machine()
    summary: dict[str, object] = {"machine": host}
    started = time.perf_counter()
    for name in names:
        module = load_benchmark(name)
        if module is None:
            console.print(f"[yellow]{name}: not available (no bench/{name}.py)[/yellow]")
            summary[name] = "not available"
            continue
        console.rule(f"bench {name}")
        out = Path(tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".json")[1])
        argv = [*common, "--out", str(out)]
        if name == "store":
            argv += ["--sizes", sizes, "--queries", str(queries)] + (["--plot", str(plot)] if plot else [])
        elif name in PLOTTED and plot:
            argv += ["--plot", str(plot)]
        if name in BASELINED and baseline:
            argv += ["--baseline", baseline]
        began = time.perf_counter()
        module.main(argv)
        result = json.loads(out.read_text()) if out.stat().st_size else {}
        out.unlink()
        summary[name] = {"seconds": round(time.perf_counter() - began, 1), **result}
    summary["seconds"] = round(time.perf_counter() - started, 1)
    if hasattr(os, "getloadavg"):  # the load at the end too: the machine may be shared
        host["load_end"] = [round(x, 2) for x in os.getloadavg()]
    console.print(f"benchmarks done in {summary['seconds']:.0f} s")
    if json_out:
        json_out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        console.print(f"wrote {json_out}", soft_wrap=True)
    return summary

