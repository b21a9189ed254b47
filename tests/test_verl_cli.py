"""`memupdate rl train` (checks, dry run, start-up fork cleanup), `memupdate db forks` and `db status`,
against the real embedded PostgreSQL; the printed command is run by bash into verl's own entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("verl")

from typer.testing import CliRunner
from verl_support import REPO, load_base, row_for, write_parquet

from memupdate.cli import app
from memupdate.rl.data.namespaces import rollout_namespace, trajectory_namespace
from memupdate.rl.leftover_forks import list_forks
from memupdate.rl.verl.launch import plan_training

runner = CliRunner()


@pytest.fixture
def dataset(store, tmp_path):
    """A loaded base and train/test parquet files of rows forking from it."""
    load_base(store)
    train = write_parquet([row_for(store, qa_index=i) for i in range(3)], tmp_path / "data" / "train.parquet")
    test = write_parquet([row_for(store, qa_index=9)], tmp_path / "data" / "test.parquet")
    return [
        f"data.train_files={train}",
        f"data.val_files={test}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_dry_run_prints_a_command_verl_runs_unchanged(dataset, database_url, tmp_path) -> None:
    """~10 s (verl's entry point composes the config in a subprocess): the proof that the printed
    command runs unchanged, so it stays in the default run."""
    code, output = invoke(
        "rl", "train", "--dry-run", "--url", database_url, "trainer.n_gpus_per_node=4", *dataset
    )
    assert code == 0, output
    assert "ok database" in output and "1 base namespaces loaded" in output and "would drop 0" in output
    config_text, command_text = output.split("# resolved config\n", 1)[1].split("# command\n")
    assert "memupdate.rl.verl.compute_score" in config_text and "n_gpus_per_node: 4" in config_text
    assert f"MEMUPDATE_DATABASE_URL: {database_url.split('://')[0]}" in config_text
    assert (
        "python -m verl.trainer.main_ppo --config-path" in command_text
        and "locomo_memory_grpo" in command_text
    )
    assert "tool_config_path=" + str(REPO / "configs" / "tool_config" / "memory_tools.yaml") in command_text
    assert not (tmp_path / "ckpt").exists()  # a dry run writes nothing

    # What a GPU user pastes into bash (venv active); verl's own entry point prints the config it would train with.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "MEMUPDATE_DATABASE_URL": database_url}
    result = subprocess.run(
        ["bash", "-c", command_text.strip() + " --cfg job"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        f"MEMUPDATE_DATABASE_URL: {database_url}" in result.stdout and "n_gpus_per_node: 4" in result.stdout
    )
    assert str(tmp_path / "data" / "train.parquet") in result.stdout


def test_start_up_drops_leftover_forks_of_the_datasets_bases_only(dataset, store, database_url) -> None:
    store.fork(rollout_namespace(trajectory_namespace(store.namespace, "crashed-qa0-aaaa0000"), "r1"))
    other = store.scoped((*store.namespace[:-1], store.namespace[-1] + "-other"))
    other.create("another bank")
    kept = other.fork(trajectory_namespace(other.namespace, "other-qa0-bbbb0000"))
    try:
        plan = plan_training("locomo_memory_grpo", dataset, url=database_url, prune_after=timedelta(0))
        assert "dropped 1 leftover trajectory forks" in plan.checks[-1]
        assert list_forks(store, store.namespace) == [] and kept.count() == 1
        plan = plan_training("locomo_memory_grpo", dataset, url=database_url, prune_after=timedelta(hours=1))
        assert "dropped 0" in plan.checks[-1]
    finally:
        kept.drop()
        other.drop()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["data.train_files=/nowhere/train.parquet"], "dataset file /nowhere/train.parquet does not exist: write it with `memupdate data preprocess"),
        (["trainer.no_such_key=1"], "does not compose"),
        (["--config", "locomo_memory_ppo"], "no training config 'locomo_memory_ppo': choose one of locomo_memory_compaction_grpo, locomo_memory_dapo, locomo_memory_grpo, relation_grpo"),
    ],
)
def test_bad_launch_input_is_one_clear_line(dataset, database_url, change, message) -> None:
    code, output = invoke("rl", "train", "--dry-run", "--url", database_url, *dataset, *change)
    assert code == 2 and message in " ".join(output.split()), output


def test_missing_base_namespace_names_the_load_command(dataset, store, database_url) -> None:
    for memory in store.list():
        store.delete(memory.key)
    code, output = invoke("rl", "train", "--dry-run", "--url", database_url, *dataset)
    assert code == 2 and "hold no memories in" in output
    assert f"memupdate data load --locomo FILE --conversations {store.namespace[-1]}" in " ".join(
        output.split()
    )


def test_foreign_parquet_and_unreachable_database(dataset, database_url, tmp_path) -> None:
    foreign = write_parquet([{"prompt": "x", "extra_info": {"index": 0}}], tmp_path / "foreign.parquet")
    code, output = invoke(
        "rl", "train", "--dry-run", "--url", database_url, *dataset, f"data.train_files={foreign}"
    )
    assert code == 2 and "was not written by `memupdate data preprocess`" in " ".join(output.split())
    code, output = invoke(
        "rl", "train", "--dry-run", "--url", "postgresql://nobody@127.0.0.1:1/none", *dataset
    )
    assert code == 2 and "cannot connect to PostgreSQL at" in output


def test_db_forks_lists_prunes_and_status_counts_them_apart(store, database_url) -> None:
    store.create("a fact")
    fork = store.fork(trajectory_namespace(store.namespace, "run-qa1-cccc0000"))
    code, output = invoke("db", "status", "--url", database_url, "--json")
    status = json.loads(output)
    assert code == 0 and status["forks"] >= 1 and status["bases"] >= 1 and status["fork_memories"] >= 1
    prefix = "/".join(store.namespace)
    code, output = invoke("db", "forks", "--url", database_url, "--prefix", prefix, "--json")
    (row,) = json.loads(output)["forks"]
    assert (
        row["namespace"] == fork.path
        and row["base"] == store.path
        and row["memories"] == 1
        and row["events"] == 1
    )
    code, output = invoke(
        "db", "forks", "--url", database_url, "--prefix", prefix, "--prune", "--older-than", "1h"
    )
    assert code == 0 and "dropped 0 trajectory forks" in output and fork.count() == 1
    code, output = invoke("db", "forks", "--url", database_url, "--prefix", prefix, "--prune")
    assert code == 0 and "dropped 1 trajectory forks" in output and fork.count() == 0
    code, output = invoke("db", "forks", "--url", database_url, "--older-than", "soon")
    assert code == 2 and "--older-than: duration 'soon' is not like 90s, 30m, 6h or 2d" in output


@pytest.mark.slow
def test_cluster_script_runs_the_checked_launcher(dataset, database_url, tmp_path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "MEMUPDATE_DATABASE_URL": database_url,
        "RAY_ADDRESS": "127.0.0.1:6379",
        "NNODES": "1",
        "GPUS_PER_NODE": "4",
        "DATA_DIR": str(tmp_path / "data"),
    }
    script = REPO / "scripts" / "train_cluster.sh"
    result = subprocess.run(
        ["bash", str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    command = result.stdout.split("# command\n")[1]
    assert "trainer.nnodes=1" in command and "trainer.n_gpus_per_node=4" in command
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct" in command
    assert f"data.train_files={tmp_path / 'data' / 'train.parquet'}" in command
    missing = subprocess.run(
        ["bash", str(script)], env={**env, "RAY_ADDRESS": ""}, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "set RAY_ADDRESS to the Ray head" in missing.stderr


def test_secrets_are_masked_and_local_databases_refused_for_several_nodes(monkeypatch) -> None:
    from memupdate.rl.verl.launch import LaunchError, check_reachable_from_nodes, mask_secrets

    config = {"reward": {"custom_reward_function": {"reward_kwargs": {"answerer_api_key": "sk-1", "qa": "answerer"}}},
              "env_vars": {"MEMUPDATE_EMBEDDING_API_KEY": "sk-2", "MEMUPDATE_DATA_DIR": "/d"},
              "data": {"tokenizer": "t", "max_prompt_tokens": 3}}
    masked = mask_secrets(config)
    assert masked["reward"]["custom_reward_function"]["reward_kwargs"] == {"answerer_api_key": "***", "qa": "answerer"}
    assert masked["env_vars"] == {"MEMUPDATE_EMBEDDING_API_KEY": "***", "MEMUPDATE_DATA_DIR": "/d"}
    assert masked["data"] == config["data"]
    check_reachable_from_nodes("postgresql://u:p@db.internal:5432/m", 4)
    check_reachable_from_nodes("postgresql://postgres:@/postgres?host=/tmp/pg", 1)
    for url in ("postgresql://postgres:@/postgres?host=/tmp/pg", "postgresql://u@localhost/m"):
        with pytest.raises(LaunchError, match="only reachable on this machine"):
            check_reachable_from_nodes(url, 2)
