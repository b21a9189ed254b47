"""A scripted chat model for the agent tests: no pretrained LLM can be downloaded here, so the script plays
the model's side of the conversation (LangChain's `FakeMessagesListChatModel`).

    model = ScriptedModel(responses=[AIMessage("", tool_calls=[...]), AIMessage("Done.")])
    run_episode(model, bank)
    model.bound        # the tools the graph bound it to
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel


class ScriptedModel(FakeMessagesListChatModel):
    """Replays `responses` in order and records the tools it was bound to."""

    bound: list[Any] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        self.bound = list(tools)
        return self
