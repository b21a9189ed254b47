"""`MemoryAgentLoop`: verl's `ToolAgentLoop` plus one fork per rollout and the reward set in the loop.

Registered as `memupdate_agent` through `configs/agent_loop.yaml`
(`actor_rollout_ref.rollout.agent.agent_loop_config_path`); the configs make it the default loop.

    [{"name": "memupdate_agent", "_target_": "memupdate.rl.verl.agent_loop.MemoryAgentLoop"}]

The multi-turn loop is verl's own: generate, parse Hermes `<tool_call>` blocks, run the memory tools
(`MemoryEditTool`: the first call forks the base for this rollout), feed the results back. Then,
while the fork is still open, the reward (`memupdate.scoring.reward.compute_reward` through
`forks.finish_rollout`) becomes `reward_score`, so verl skips its reward workers; its parts go to
`extra_fields["reward_extra_info"]`, which verl logs. The fork is dropped afterwards, also when the
rollout fails: a crash mid-episode still returns the trajectory up to the crash, scored on what the
fork holds, with `crashed = 1` in its parts and the error logged. A rollout that never edited scores 0
(a compaction rollout less the cost of each call it wrote that never ran, `forks.count_unrun_calls`).
Reward knobs come from `reward.custom_reward_function.reward_kwargs`, the same place as the
`compute_score` route's.

The loop is the same for both tasks; the row decides. A targeted row (one question) forks the whole
base and is scored by `compute_reward`; a compaction row (`memupdate data preprocess --task compaction`,
`configs/locomo_memory_compaction_grpo.yaml`) names no question, so the episode is blind, its fork holds
only its neighbourhood, and it is scored by `compute_compaction_reward` on the whole bank (`forks`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop

from memupdate.rl.verl.forks import count_unrun_calls, drop_rollout_fork, finish_rollout, reward_config

log = logging.getLogger("memupdate.rl.verl.agent_loop")


class MemoryAgentLoop(ToolAgentLoop):
    """verl's tool agent loop for one rollout (verl builds one instance per rollout), rewarded in the loop."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.reward_config = reward_config(self.config.reward.custom_reward_function.get("reward_kwargs"))
        self.agent_data: AgentData | None = None

    async def _handle_pending_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any]
    ) -> AgentState:
        self.agent_data = agent_data  # the rollout's state, reachable when `run` fails half-way
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = dict(kwargs.get("extra_info") or {})
        output, failure = None, None
        try:
            output = await super().run(sampling_params, **kwargs)
        except asyncio.CancelledError:  # verl cancelled the rollout: no reward, but no fork left behind
            if self.agent_data is not None:
                await drop_rollout_fork(self.agent_data.extra_fields)
            raise
        except Exception as exc:
            failure = exc
            log.exception(
                "rollout of %s crashed; scoring what its fork holds", extra_info.get("trajectory_id")
            )
            if self.agent_data is not None and self.agent_data.prompt_ids:
                output = self._output_so_far(self.agent_data)
        state = self.agent_data.extra_fields if self.agent_data is not None else {}
        if output is not None:
            written = [t for t, m in zip(output.response_ids, output.response_mask, strict=False) if m]
            count_unrun_calls(state, self.tokenizer.decode(written))
        score = await finish_rollout(state, extra_info, self.reward_config, crashed=failure is not None)
        if output is None:  # crashed before a prompt existed: nothing to train on
            raise failure
        output.reward_score = score.reward
        output.extra_fields["reward_extra_info"] = score.parts
        if failure is not None:
            output.extra_fields["memupdate_error"] = f"{type(failure).__name__}: {failure}"
        return output

    def _output_so_far(self, agent_data: AgentData) -> AgentLoopOutput:
        """The trajectory up to the last completed step, as `ToolAgentLoop.run` would have returned it."""
        n_response = len(agent_data.response_mask)
        split = len(agent_data.prompt_ids) - n_response
        return AgentLoopOutput(
            prompt_ids=agent_data.prompt_ids[:split],
            response_ids=agent_data.prompt_ids[split:][: self.response_length],
            response_mask=agent_data.response_mask[: self.response_length],
            response_logprobs=agent_data.response_logprobs[: self.response_length] or None,
            multi_modal_data={},
            num_turns=agent_data.user_turns + agent_data.assistant_turns + 1,
            metrics=agent_data.metrics,
            extra_fields=agent_data.extra_fields,
        )
