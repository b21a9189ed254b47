"""Our GRPO and DAPO configs compose with Hydra over verl 0.9.1's own trainer config and pass verl's own
validation (`verl.utils.config.validate_config`, the rollout and algorithm dataclasses), on a CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("verl")

from verl_support import AGENT_LOOP_CONFIG, CONFIGS, REPO, TOOL_CONFIG, compose, validate


def test_grpo_config_composes_over_verl_and_validates() -> None:
    config = compose("locomo_memory_grpo")
    validate(config)
    rollout, actor = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-3B-Instruct"
    assert config.algorithm.adv_estimator == "grpo" and config.data.train_batch_size == 64 and rollout.n == 8
    assert rollout.name == "sglang" and rollout.mode == "async" and actor.strategy == "fsdp"
    assert rollout.multi_turn.enable and rollout.multi_turn.max_assistant_turns == 15
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.001 and actor.kl_loss_type == "low_var_kl"
    assert not config.algorithm.use_kl_in_reward
    assert config.trainer.test_freq == 25 and list(config.trainer.logger) == ["console", "wandb"]
    assert config.data.val_files.endswith("test.parquet")
    assert "hf_model" in actor.checkpoint.save_contents
    # The paths the rollout workers open, relative to the repository root.
    assert (REPO / rollout.multi_turn.tool_config_path) == TOOL_CONFIG
    assert (REPO / rollout.agent.agent_loop_config_path) == AGENT_LOOP_CONFIG
    assert rollout.agent.default_agent_loop == "memupdate_agent"
    assert config.reward.custom_reward_function.path == "pkg://memupdate.rl.verl.compute_score"


def test_dapo_config_composes_over_verl_and_validates() -> None:
    from verl.trainer.config import FilterGroupsConfig
    from verl.utils.config import omega_conf_to_dataclass

    config = compose("locomo_memory_dapo")
    validate(config)
    actor = config.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    filter_groups = omega_conf_to_dataclass(config.algorithm.filter_groups, FilterGroupsConfig)
    assert filter_groups.enable and filter_groups.metric == "reward"
    assert config.trainer.experiment_name == "locomo_memory_dapo" and config.actor_rollout_ref.rollout.n == 8


def test_agent_loop_config_names_our_loop() -> None:
    from omegaconf import OmegaConf
    from verl.utils.import_utils import load_class_from_fqn

    from memupdate.rl.verl.agent_loop import MemoryAgentLoop

    (entry,) = OmegaConf.load(AGENT_LOOP_CONFIG)
    assert entry.name == "memupdate_agent" and load_class_from_fqn(entry._target_) is MemoryAgentLoop


@pytest.mark.slow
@pytest.mark.parametrize("name", ["locomo_memory_grpo", "locomo_memory_dapo", "locomo_memory_compaction_grpo"])
def test_verls_own_entry_point_composes_our_configs(name: str) -> None:
    """`python -m verl.trainer.main_ppo ... --cfg job` prints the config and exits (~13 s each)."""
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(CONFIGS), "--config-name", name, "--cfg", "job"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "memupdate.rl.verl.compute_score" in result.stdout and "memupdate_agent" in result.stdout
