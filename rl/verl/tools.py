"""The six memory tools as verl tools: one `BaseTool` class, named six times in
`configs/tool_config/memory_tools.yaml`, a thin adapter over `memupdate.agent.tools.run_tool`.

    from verl.tools.tool_registry import initialize_tools_from_config
    tools = initialize_tools_from_config("configs/tool_config/memory_tools.yaml")   # six MemoryEditTools

verl's tool agent loop calls `create` -> `execute` -> `release` around *every* tool call, and one tool
object serves every rollout of the worker. So a rollout's state lives in PostgreSQL (its fork) and
in `agent_data.extra_fields` (the fork's path and call counts, see `memupdate.rl.verl.forks`); the tool
keeps only the row's `create_kwargs` between `create` and `release` of one call. The first call of a
rollout forks the base (`open_rollout_fork`). Every problem comes back as the tool's text, never as
an exception out of `execute`; results are capped by `run_tool` at `MAX_RESULT_CHARS` (2,000), within
the `max_tool_response_length` the configs set (2,048).
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from memupdate.agent.tools import MEMORY_TOOLS, run_tool
from memupdate.errors import MemupdateError
from memupdate.rl.verl.forks import RowBank, count_call, open_rollout_fork
from memupdate.rl.verl.worker_db import in_db_thread

log = logging.getLogger("memupdate.rl.verl.tools")


class MemoryEditTool(BaseTool):
    """One of the six memory tools (which one: the schema's function name) for verl's agent loops."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema):
        super().__init__(config, tool_schema)
        if self.name not in MEMORY_TOOLS:
            raise ValueError(
                f"tool {self.name!r} in the tool config is not a memory tool ({', '.join(MEMORY_TOOLS)}): "
                "regenerate the file with `memupdate tools schema --yaml`"
            )
        self.tool = MEMORY_TOOLS[self.name]
        self._calls: dict[str, Any] = {}  # instance id -> the row's create_kwargs, for one call only

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        # verl passes the row's `tools_kwargs[name]["create_kwargs"]` as one keyword.
        self._calls[instance_id] = kwargs.get("create_kwargs", kwargs)
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            return _error(f"{self.name} needs verl's agent_data (run it from a tool agent loop)"), 0.0, {}
        state = agent_data.extra_fields
        try:
            bank = RowBank.from_create_kwargs(self._calls.get(instance_id))
            fork = await open_rollout_fork(agent_data, state, bank)
            result = await in_db_thread(run_tool, fork, self.name, parameters)
        except MemupdateError as exc:
            count_call(state, ok=False, writes=self.tool.writes)
            log.warning("%s failed in rollout %s: %s", self.name, agent_data.request_id, exc)
            return _error(str(exc)), 0.0, {}
        except Exception as exc:  # the rollout goes on; the model reads what went wrong
            count_call(state, ok=False, writes=self.tool.writes)
            log.exception("%s crashed in rollout %s", self.name, agent_data.request_id)
            return _error(f"{self.name} failed: {type(exc).__name__}: {exc}"), 0.0, {}
        count_call(state, ok=result.ok, writes=self.tool.writes)
        return ToolResponse(text=result.text), 0.0, {"ok": result.ok}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._calls.pop(instance_id, None)


def _error(message: str) -> ToolResponse:
    return ToolResponse(text=message if message.startswith("error:") else f"error: {message}")
