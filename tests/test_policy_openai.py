"""make_openai_policy against a scripted local /v1/chat/completions server.

No pretrained LLM weights can be downloaded here and there is no SGLang/vLLM server, so the stand-in
server (`tests/openai_standin.py`, on 127.0.0.1) replies with what SGLang returns after its
hermes/qwen25 parser has turned <tool_call> blocks into OpenAI tool_calls.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from openai_standin import OpenAIStandIn, completion

from memupdate.agent.policies.openai import check_openai_endpoint, make_openai_policy
from memupdate.errors import MemupdateError

SCRIPT = [
    completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "search_memory", "arguments": '{"query": "where does Ann live"}'},
                }
            ],
        },
        "tool_calls",
    ),
    completion({"role": "assistant", "content": "Ann lives in Berlin."}, "stop"),
]


@pytest.fixture
def server():
    """Yield (port, recorded request bodies); replies follow SCRIPT in order."""
    replies = iter(SCRIPT)
    with OpenAIStandIn(lambda _body: next(replies)) as standin:
        yield standin.port, standin.requests


@tool
def search_memory(query: str) -> str:
    """Search stored memories for text relevant to the query."""
    return '[{"id": 7, "content": "Ann moved to Berlin"}]'


def test_tool_call_round_trip(server):
    port, requests = server
    policy = make_openai_policy("memupdate-policy", base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
    model = policy.bind_tools([search_memory])

    question = HumanMessage("Where does Ann live?")
    first = model.invoke([question])
    (call,) = first.tool_calls
    assert call == {
        "name": "search_memory",
        "args": {"query": "where does Ann live"},
        "id": "call_abc",
        "type": "tool_call",
    }

    result = search_memory.invoke(call)  # A ToolMessage answering call_abc.
    assert isinstance(result, ToolMessage)
    final = model.invoke([question, first, result])
    assert final.content == "Ann lives in Berlin." and final.tool_calls == []

    first_request, second_request = requests
    assert first_request["model"] == "memupdate-policy" and first_request["temperature"] == 0.0
    (schema,) = first_request["tools"]
    assert schema["type"] == "function" and schema["function"]["name"] == "search_memory"
    assert schema["function"]["parameters"]["properties"]["query"]["type"] == "string"
    roles = [m["role"] for m in second_request["messages"]]
    assert roles == ["user", "assistant", "tool"]
    assert second_request["messages"][1]["tool_calls"][0]["id"] == "call_abc"
    tool_message = second_request["messages"][2]
    assert tool_message["tool_call_id"] == "call_abc" and "Ann moved to Berlin" in tool_message["content"]


def test_api_key_fallbacks(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert (
        make_openai_policy("m", base_url="http://127.0.0.1:1/v1").openai_api_key.get_secret_value() == "EMPTY"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert make_openai_policy("m").openai_api_key.get_secret_value() == "from-env"
    assert make_openai_policy("m", api_key="given").openai_api_key.get_secret_value() == "given"
    monkeypatch.setenv("OPENAI_API_KEY", "")
    assert make_openai_policy("m", api_key="").openai_api_key.get_secret_value() == "EMPTY", "blank counts as unset"


def test_endpoint_check_names_the_fix() -> None:
    """The policy's check is the answerer's (`memupdate.openai_endpoint.check_endpoint`): a server with no
    /models is asked a 1-token completion, so the model name is checked there too."""
    with OpenAIStandIn(lambda _body: "ok", models=("served",)) as server:
        check_openai_endpoint("served", server.base_url)
        unserved = r"openai policy model 'other' is not served .* \(it serves served\): pass one of those to --model"
        with pytest.raises(MemupdateError, match=unserved):
            check_openai_endpoint("other", server.base_url)
        assert server.requests == [], "a listed model needs no completion"
        server.models = None
        check_openai_endpoint("anything", server.base_url)
        assert [r["max_tokens"] for r in server.requests] == [1], "no /models: one 1-token completion"
        server.reply = lambda _body: 404
        gone = r"has no GET /models and answered a 1-token completion for model 'gone' with HTTP 404: check --model"
        with pytest.raises(MemupdateError, match=gone):
            check_openai_endpoint("gone", server.base_url)
        server.models = 401
        with pytest.raises(MemupdateError, match=r"refused the API key \(HTTP 401\): pass --api-key or set OPENAI_API_KEY"):
            check_openai_endpoint("served", server.base_url)
