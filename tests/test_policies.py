"""The policy registry (`agent.policies.POLICIES`): one spelling for every command, choices and errors read
from it, and a rollout group's members made from one loaded policy. The hf member uses conftest's
`tiny_model` (a tiny Qwen2 built from a config with a locally trained tokenizer: nothing downloaded)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from memupdate.agent.policies import (
    EDITING_POLICIES,
    POLICIES,
    POLICY_NAMES,
    make_policy,
    policy_help,
    policy_kind,
    with_seed,
)
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.cli import app
from memupdate.errors import MemupdateError
from memupdate.store import MemoryStore

runner = CliRunner()


def test_names_choices_and_errors_come_from_the_registry(store: MemoryStore) -> None:
    assert POLICY_NAMES == tuple(POLICIES) == ("heuristic", "openai", "hf", "none")
    assert "none" not in EDITING_POLICIES and set(EDITING_POLICIES) < set(POLICY_NAMES)
    assert all(name in policy_help() for name in POLICY_NAMES) and "none" not in policy_help(editing=True)
    with pytest.raises(MemupdateError, match="--policy 'gpt' is not a policy: choose one of heuristic, openai, hf, none"):
        make_policy("gpt", store)
    with pytest.raises(MemupdateError, match="--teacher 'gpt' is not a policy"):
        make_policy("gpt", store, option="--teacher")
    with pytest.raises(MemupdateError, match="--policy 'none' makes no edits: choose one of heuristic, openai, hf$"):
        policy_kind("none", editing=True)
    for name in ("openai", "hf"):
        with pytest.raises(MemupdateError, match=re.escape(f"the {name} policy needs --model: {POLICIES[name].model}")):
            make_policy(name, store)
    assert make_policy("none", store) is None
    heuristic = make_policy("heuristic", store, seed=3, max_operations=4, explore=0.5)  # a kind's own settings pass through
    assert isinstance(heuristic, HeuristicPolicy) and (heuristic.seed, heuristic.max_operations, heuristic.explore) == (3, 4, 0.5)


def test_commands_refuse_a_policy_that_makes_no_edits_in_the_registrys_words(database_url) -> None:
    for command in (["agent", "run", "--namespace", "locomo/sample-1"], ["compact", "locomo/sample-1"]):
        result = runner.invoke(app, [*command, "--policy", "none", "--url", database_url])
        assert result.exit_code != 0
        assert "makes no edits: choose one of heuristic, openai, hf" in " ".join(result.output.split()), result.output


def test_a_member_is_a_fresh_copy_with_its_own_seed_sharing_the_weights(store: MemoryStore, tiny_model) -> None:
    loaded = make_policy("hf", store, model=str(tiny_model), temperature=0.8, max_new_tokens=16, max_prose_tokens=8)
    one, two = with_seed(loaded, 1), with_seed(loaded, 2)
    assert one.hf_model is loaded.hf_model and one.tokenizer is loaded.tokenizer  # the weights are loaded once
    assert (one.seed, two.seed) == (1, 2) and (one.temperature, one.max_new_tokens, one.max_prose_tokens) == (0.8, 16, 8)
    assert one._rng is not two._rng and one._rng is not loaded._rng  # each samples from its own generator
    assert with_seed(None, 1) is None
