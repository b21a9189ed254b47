"""HuggingFaceChatModel and the Hermes tool-call parser.

No pretrained LLM weights can be downloaded here: the model is a tiny Qwen2 built from a config,
the tokenizer trained locally (the `tiny_model` fixture of conftest.py). Its weights are random, so generated text
is arbitrary; tests check types, prompts, determinism and, with a scripted generation, the full
decode -> parse -> AIMessage path.
"""

from __future__ import annotations

import pytest
import torch
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from memupdate.agent.policies.hf import HuggingFaceChatModel
from memupdate.llm import hermes
from memupdate.llm.hermes import parse_tool_calls


@pytest.fixture
def policy(tiny_model):
    return HuggingFaceChatModel.from_pretrained(tiny_model, max_new_tokens=16)


@tool
def search_memory(query: str, limit: int = 5) -> str:
    """Search stored memories."""
    return "[]"


@tool
def delete_memory(memory_id: int) -> str:
    """Delete one memory by id."""
    return "deleted"


TOOLS = [search_memory, delete_memory]
CONVERSATION = [SystemMessage("You maintain a memory database."), HumanMessage("Ann moved to Berlin.")]


def test_generation_end_to_end_with_tools(policy, monkeypatch):
    prompts = []
    render = HuggingFaceChatModel.render_prompt

    def spy(self, messages):
        prompts.append(render(self, messages))
        return prompts[-1]

    monkeypatch.setattr(HuggingFaceChatModel, "render_prompt", spy)
    reply = policy.bind_tools(TOOLS).invoke(CONVERSATION)

    assert isinstance(reply, AIMessage)
    assert isinstance(reply.content, str)
    assert isinstance(reply.tool_calls, list) and isinstance(reply.invalid_tool_calls, list)
    assert 0 < reply.usage_metadata["output_tokens"] <= 16
    (prompt,) = prompts
    assert "<tools>" in prompt and '"search_memory"' in prompt and '"delete_memory"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_unbound_model_has_no_tools_in_prompt(policy):
    assert "<tools>" not in policy.render_prompt(CONVERSATION)


def test_history_renders_tool_calls_and_responses(policy):
    call = {"name": "search_memory", "args": {"query": "Ann"}, "id": "call_0_x", "type": "tool_call"}
    history = [
        *CONVERSATION,
        AIMessage("Looking.", tool_calls=[call]),
        ToolMessage('[{"id": 7, "content": "Ann lives in Paris"}]', tool_call_id="call_0_x"),
    ]
    prompt = policy.bind_tools(TOOLS).render_prompt(history)
    expected_call = '<|im_start|>assistant\nLooking.\n<tool_call>\n{"name": "search_memory", "arguments": {"query": "Ann"}}\n</tool_call><|im_end|>'
    assert expected_call in prompt
    assert '<tool_response>\n[{"id": 7, "content": "Ann lives in Paris"}]\n</tool_response>' in prompt


def test_invalid_call_from_model_lands_in_invalid_tool_calls(policy, monkeypatch):
    reply_text = (
        "I will fix it.\n"
        '<tool_call>\n{"name": "delete_memory", "arguments": {"memory_id": 7}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search_memory", "arguments": {"query": "Ann"\n</tool_call>'
    )

    def scripted_generate(input_ids, **kwargs):
        # Prompt followed by the scripted reply and EOS, as generate() returns it.
        new = policy.tokenizer(reply_text, add_special_tokens=False, return_tensors="pt").input_ids
        eos = torch.tensor([[policy.tokenizer.eos_token_id]])
        return torch.cat([input_ids, new, eos], dim=1)

    monkeypatch.setattr(policy.hf_model, "generate", scripted_generate)
    reply = policy.bind_tools(TOOLS).invoke(CONVERSATION)

    assert reply.content == "I will fix it."
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("delete_memory", {"memory_id": 7})]
    (bad,) = reply.invalid_tool_calls
    assert bad["type"] == "invalid_tool_call" and bad["name"] is None
    assert bad["args"] == '{"name": "search_memory", "arguments": {"query": "Ann"'
    assert "invalid JSON" in bad["error"] and bad["id"] != reply.tool_calls[0]["id"]


def test_seeded_sampling_is_reproducible(tiny_model):
    def sample(seed):
        model = HuggingFaceChatModel.from_pretrained(
            tiny_model, max_new_tokens=24, temperature=1.0, seed=seed
        )
        replies = [model.invoke(CONVERSATION) for _ in range(2)]
        return [(r.content, r.tool_calls, r.invalid_tool_calls, r.usage_metadata) for r in replies]

    first = sample(seed=1)
    assert sample(seed=1) == first
    assert sample(seed=2) != first
    assert first[0] != first[1]  # Successive calls draw fresh samples.


def test_greedy_is_deterministic(policy):
    assert policy.invoke(CONVERSATION).content == policy.invoke(CONVERSATION).content


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_bad_checkpoint_path_is_a_clear_error(tmp_path, make):
    path = tmp_path / "ckpt"
    if make == "empty":
        path.mkdir()
    with pytest.raises(ValueError, match=r"(?s)ckpt.*Hugging Face checkpoint directory with config\.json"):
        HuggingFaceChatModel.from_pretrained(path)


def test_missing_chat_template_is_a_clear_error(tiny_model_without_chat_template):
    with pytest.raises(ValueError, match="no chat template.*chat_template.jinja"):
        HuggingFaceChatModel.from_pretrained(tiny_model_without_chat_template)


# --- parser ---------------------------------------------------------------------------------------


def test_parse_one_valid_call():
    text, calls, errors = parse_tool_calls(
        '<tool_call>\n{"name": "search_memory", "arguments": {"query": "Ann"}}\n</tool_call>'
    )
    assert text == "" and errors == []
    (call,) = calls
    assert call["name"] == "search_memory" and call["args"] == {"query": "Ann"}
    assert call["type"] == "tool_call" and call["id"].startswith("call_0_")


def test_parse_multiple_calls_with_text_around():
    text, calls, errors = parse_tool_calls(
        "First I search.\n"
        '<tool_call>{"name": "search_memory", "arguments": {"query": "Ann"}}</tool_call>\n'
        "then delete\n"
        '<tool_call>{"name": "delete_memory", "arguments": {"memory_id": 3}}</tool_call>\n'
        '<tool_call>{"name": "delete_memory", "arguments": {"memory_id": 3}}</tool_call>  done.  '
    )
    assert errors == []
    assert [c["name"] for c in calls] == ["search_memory", "delete_memory", "delete_memory"]
    assert len({c["id"] for c in calls}) == 3  # Unique even for identical calls.
    assert text.startswith("First I search.") and "then delete" in text and text.endswith("done.")
    assert "<tool_call>" not in text


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ('{"name": "search_memory", "arguments": {"query": }}', "invalid JSON"),
        ('{"arguments": {"query": "Ann"}}', 'missing "name"'),
        ('{"name": "search_memory", "arguments": "query=Ann"}', '"arguments" must be a JSON object, not str'),
        ('["search_memory"]', "must hold a JSON object, not list"),
    ],
)
def test_parse_malformed_call(block, problem):
    text, calls, errors = parse_tool_calls(f"ok <tool_call>{block}</tool_call>")
    assert text == "ok" and calls == []
    (error,) = errors
    assert problem in error and '"arguments"' in error  # Says what is expected, too.


def test_parse_unterminated_call_keeps_earlier_calls():
    text, calls, errors = parse_tool_calls(
        'a <tool_call>{"name": "search_memory", "arguments": {}}</tool_call> b <tool_call>{"name": "sea'
    )
    assert text == "a  b" and [c["name"] for c in calls] == ["search_memory"]
    (error,) = errors
    assert "unterminated" in error


def test_invalid_calls_become_invalid_tool_call_dicts():
    message = hermes.to_ai_message('<tool_call>{"name": "search_memory", "arguments": [1]}</tool_call>')
    (bad,) = message.invalid_tool_calls
    assert bad == {
        "type": "invalid_tool_call",
        "name": "search_memory",
        "args": '{"name": "search_memory", "arguments": [1]}',
        "id": bad["id"],
        "error": bad["error"],
    }
    assert message.tool_calls == []


def test_format_round_trips():
    text, calls, _ = parse_tool_calls(hermes.format_tool_call("delete_memory", {"memory_id": 1, "why": "é"}))
    assert [(c["name"], c["args"]) for c in calls] == [("delete_memory", {"memory_id": 1, "why": "é"})]


def test_checkpoint_drives_the_memory_graph(policy, store, monkeypatch):
    """A loaded checkpoint runs in the graph against a live bank: here its (scripted) Hermes output
    calls a real tool, then stops; the random-weight model itself cannot be expected to call one."""
    from memupdate.agent.graph import run_episode

    store.create("Ann moved to Berlin in 2021.", key="f0000")
    replies = iter(['<tool_call>{"name": "search_memory", "arguments": {"query": "Berlin"}}</tool_call>', "Done."])
    monkeypatch.setattr(policy.tokenizer, "decode", lambda *a, **k: next(replies))
    policy = policy.model_copy(update={"constrain_handles": False})  # it would decode too: the replies are scripted
    result = run_episode(policy, store, question="Where does Ann live?")
    assert result.stop_reason == "model_stopped" and result.tool_counts == {"search_memory": 1}
    assert "[f0000]" in result.messages[3].content
    from memupdate.agent.tools import MEMORY_TOOLS, tool_schemas

    prompt = policy.bind_tools(tool_schemas()).render_prompt(result.messages[:2])
    assert all(f'"{name}"' in prompt for name in MEMORY_TOOLS), "the six tools are in the model's prompt"
