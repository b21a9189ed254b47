"""verl's own multi-turn loops, end to end on a CPU: `MemoryAgentLoop` (reward in the loop) and verl's
stock `ToolAgentLoop` with our `compute_score`, driven by a scripted stand-in for the rollout server.

The stand-in returns the token ids of scripted Hermes tool calls, encoded with the tiny locally
trained tokenizer (no LLM weights exist here); verl's loop parses them, calls our tools on real
per-rollout forks in the embedded PostgreSQL, and builds the token sequence and response mask.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("verl")

from verl_support import (
    HELPFUL_FACT,
    SAMPLING,
    TOOL_CONFIG,
    ScriptedServer,
    compose,
    cpu_overrides,
    load_base,
    make_loop,
    masked_text,
    rollout_kwargs,
    row_for,
    tool_call,
)

from memupdate.rl.verl import forks
from memupdate.store import drop_fork

CREATE_HELPFUL = tool_call("manage_memory", {"action": "create", "content": HELPFUL_FACT})


@pytest.fixture(scope="module")
def config(tiny_model):
    return compose("locomo_memory_grpo", cpu_overrides(tiny_model))


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def tools():
    from verl.tools.tool_registry import initialize_tools_from_config

    return initialize_tools_from_config(str(TOOL_CONFIG))


@pytest.fixture
def base(store, worker_root):
    load_base(store)
    return store


async def run_group(agent: str, scripts, config, tokenizer, tools, row, **server_options):
    server = ScriptedServer(tokenizer, scripts, **server_options)
    loops = [make_loop(agent, config, server, tokenizer, tools) for _ in scripts]
    outputs = await asyncio.gather(*(loop.run(dict(SAMPLING), **rollout_kwargs(row)) for loop in loops))
    return outputs, server


def by_script(outputs, scripts, tokenizer) -> dict:
    """Each output under the index of the script it followed (found by its first reply, which differ)."""
    found = {}
    for output in outputs:
        written = masked_text(tokenizer, output, 1)
        (index,) = [i for i, script in enumerate(scripts) if script[0] in written]
        found[index] = output
    return found


def forks_left(base, row) -> list:
    return base.list_namespaces(prefix=tuple(row["extra_info"]["namespace"].split("/")))


async def test_memory_agent_loop_forks_per_rollout_and_sets_the_reward(
    config, tokenizer, tools, base
) -> None:
    row = row_for(base)
    scripts = [
        [CREATE_HELPFUL, "The bank now says where Ann moved."],                       # helps the target
        [tool_call("search_memory", {"query": "Ann moved"}), "Nothing to fix."],      # reads only
        ["The memory looks fine to me."],                                             # no tool call
        [tool_call("delete_memory", {"memory_id": "f0001"}), "Deleted."],             # hurts a collateral question
    ]
    outputs, server = await run_group("memupdate_agent", scripts, config, tokenizer, tools, row)
    helped, read, silent, harmed = (by_script(outputs, scripts, tokenizer)[i] for i in range(4))

    assert helped.reward_score > 0 and harmed.reward_score < 0
    assert read.reward_score == 0.0 and silent.reward_score == 0.0
    assert (
        silent.extra_fields["reward_extra_info"]["forked"] == 0.0
        and read.extra_fields["reward_extra_info"]["forked"] == 1.0
    )
    assert len({tuple(sorted(o.extra_fields["reward_extra_info"])) for o in outputs}) == 1
    assert helped.extra_fields["reward_extra_info"]["edits"] == 1.0 and helped.num_turns == 4
    assert forks_left(base, row) == [] and base.count() == 6

    # Response mask: 1 on what the model wrote, 0 on the tool results the loop inserted.
    assert len(helped.response_ids) == len(helped.response_mask)
    written, inserted = masked_text(tokenizer, helped, 1), masked_text(tokenizer, helped, 0)
    assert HELPFUL_FACT in written and "The bank now says where Ann moved." in written
    assert "<tool_response>" in inserted and "created [m" in inserted and HELPFUL_FACT in inserted
    assert "<tool_response>" not in written and silent.response_mask == [1] * len(silent.response_mask)
    # The tool result reached the model's next prompt whole (results fit max_tool_response_length).
    second_prompt = tokenizer.decode(
        server.prompts[next(r for r in server.turns if server.turns[r][0] == 0)][1]
    )
    assert "created [m" in second_prompt and "truncated" not in second_prompt


async def test_stock_tool_agent_loop_with_compute_score(config, tokenizer, tools, base) -> None:
    from memupdate.rl.verl.compute_score import compute_score

    row = row_for(base)
    scripts = [[CREATE_HELPFUL, "Done."], ["No edits needed."]]
    outputs, server = await run_group("tool_agent", scripts, config, tokenizer, tools, row)
    outputs = by_script(outputs, scripts, tokenizer)
    assert outputs[0].reward_score is None  # verl's loop leaves the reward to the reward worker
    assert outputs[0].extra_fields[forks.FORK_KEY] and forks.FORK_KEY not in outputs[1].extra_fields
    assert len(forks_left(base, row)) == 1  # the fork waits, open, for its reward

    scores = []
    for output in (outputs[0], outputs[1]):
        extra_info = {**row["extra_info"], **output.extra_fields}  # what verl's reward manager merges
        scores.append(await compute_score("locomo", "...", row["reward_model"]["ground_truth"], extra_info))
    assert scores[0]["score"] > 0 and scores[1]["score"] == 0.0
    assert sorted(scores[0]) == sorted(scores[1]) and scores[0]["edits"] == 1.0
    assert forks_left(base, row) == []


async def test_a_rollout_crashing_mid_episode_is_scored_logged_and_its_fork_dropped(
    config, tokenizer, tools, base, caplog
) -> None:
    row = row_for(base)
    scripts = [[CREATE_HELPFUL, "never reached"]]
    with caplog.at_level(logging.ERROR, logger="memupdate.rl.verl.agent_loop"):
        outputs, _ = await run_group(
            "memupdate_agent", scripts, config, tokenizer, tools, row, fail_at=(0, 1)
        )
    (output,) = outputs
    assert output.extra_fields["reward_extra_info"]["crashed"] == 1.0 and output.reward_score > 0
    assert "ConnectionError: rollout server went away" in output.extra_fields["memupdate_error"]
    assert HELPFUL_FACT in masked_text(tokenizer, output, 1) and "<tool_response>" in masked_text(
        tokenizer, output, 0
    )
    assert "crashed; scoring what its fork holds" in caplog.text
    assert forks_left(base, row) == []


async def test_malformed_tool_calls(config, tokenizer, tools, base) -> None:
    """Broken JSON in a <tool_call> block ends the episode (verl's parser drops it): reward 0, no fork.
    Arguments that are a JSON string, not an object, reach our tool and come back as an error text."""
    row = row_for(base)
    scripts = [
        [
            '<tool_call>\n{"name": "manage_memory", "arguments": {"action": "create", "content": }\n</tool_call>'
        ],
        [tool_call("manage_memory", '"{not an object"'), "Sorry."],
    ]
    outputs, server = await run_group("memupdate_agent", scripts, config, tokenizer, tools, row)
    broken, stringly = (by_script(outputs, scripts, tokenizer)[i] for i in range(2))
    assert broken.reward_score == 0.0 and broken.extra_fields["reward_extra_info"]["forked"] == 0.0
    assert "error: bad arguments for manage_memory" in masked_text(tokenizer, stringly, 0)
    assert stringly.reward_score == 0.0 and stringly.extra_fields["reward_extra_info"]["failed_calls"] == 1.0
    assert forks_left(base, row) == []


async def test_a_cancelled_rollout_leaves_no_fork(config, tokenizer, tools, base, monkeypatch) -> None:
    row = row_for(base)
    dropped = []  # the forks `drop_fork`, the one way a fork is dropped, dropped (it still runs)
    monkeypatch.setattr(forks, "drop_fork", lambda fork: dropped.append(fork.namespace) or drop_fork(fork))

    stalled = asyncio.Event()

    class StallingServer(ScriptedServer):
        async def generate(self, **kwargs):
            if len(self.prompts.get(kwargs["request_id"], [])) == 1:  # the second turn never comes back
                stalled.set()
                await asyncio.Event().wait()
            return await super().generate(**kwargs)

    server = StallingServer(tokenizer, [[CREATE_HELPFUL, "never reached"]])
    loop = make_loop("memupdate_agent", config, server, tokenizer, tools)
    task = asyncio.create_task(loop.run(dict(SAMPLING), **rollout_kwargs(row)))
    await asyncio.wait_for(stalled.wait(), timeout=60)
    (fork,) = forks_left(base, row)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert forks_left(base, row) == [] and dropped == [fork]
