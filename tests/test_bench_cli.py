"""`memupdate bench`: a smoke test of the command on the test server, at the smallest store size.
The benchmarks themselves never run in the suite (minutes, and timings mean nothing under pytest)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from memupdate.cli import app

runner = CliRunner()


def test_bench_store_writes_json_and_the_cost_curve(database_url: str, tmp_path) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "cost.png"
    result = runner.invoke(
        app, ["bench", "store", "--url", database_url, "--sizes", "200", "--queries", "12", "--out", str(out), "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    store = summary["store"]["results"]["200"]
    host = summary["machine"]  # what docs/benchmarks.md says the figures were measured on
    assert host["cores"] >= 1 and host["date"] and len(host["load_start"]) == len(host["load_end"]) == 3
    assert host["avx512"] in (True, False)
    assert set(store) == {"memupdate", "InMemoryStore", "PostgresStore"}
    assert store["memupdate"]["search_p50_ms"] > 0 and store["PostgresStore"]["recall_at_5"] > 0
    assert png.stat().st_size > 0


def test_a_benchmark_missing_from_the_checkout_is_not_available() -> None:
    from memupdate.cli.bench import ORDER, load_benchmark

    assert load_benchmark("no_such_benchmark") is None  # `bench all` then prints "not available" and goes on
    assert all(load_benchmark(name) is not None for name in ORDER)
