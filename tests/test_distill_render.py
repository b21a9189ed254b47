"""Rendering trajectories for the student: Hermes transcripts that round-trip through the `hf`
policy's parser, and a loss mask on the assistant's tokens only.

No pretrained LLM weights can be downloaded here: the tokenizer is trained locally and carries the
Qwen2.5-Instruct chat template (`memupdate.rl.distill.tiny_student`).
"""

from __future__ import annotations

import pytest
import torch
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from memupdate.agent.policies.hf import HuggingFaceChatModel
from memupdate.agent.tools import tool_schemas
from memupdate.errors import MemupdateError
from memupdate.llm import hermes
from memupdate.llm.chat import to_chat_dicts
from memupdate.rl.distill.render import as_student_saw, assistant_spans, render_transcript, tokenize_with_mask
from memupdate.rl.distill.tiny_student import train_tokenizer

END = "<|im_end|>"


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


def episode() -> list:
    search = {"name": "search_memory", "args": {"query": "When did Ann move?", "top_k": 5}, "id": "c0", "type": "tool_call"}
    merge = {"name": "merge_memory", "args": {"memory_ids": ["f0001", "f0007"], "content": "Ann moved to Berlin on 2023-05-08 ("}, "id": "c1", "type": "tool_call"}
    update = {"name": "manage_memory", "args": {"action": "update", "memory_id": "f0002", "content": "Ann's café, \"Kaffee\""}, "id": "c2", "type": "tool_call"}
    return [
        SystemMessage("You maintain a memory bank."),
        HumanMessage("Memory bank: locomo/x/traj/t1\nTarget question: When did Ann move?"),
        AIMessage("", tool_calls=[search]),
        ToolMessage("[f0001] 0.71 (2023-05-08) Ann moved to Berlin yesterday", tool_call_id="c0"),
        AIMessage("Merging the two.", tool_calls=[merge, update]),
        ToolMessage("merged 2 memories into [m1234abcd] ...", tool_call_id="c1"),
        ToolMessage("updated [f0002] ...", tool_call_id="c2"),
        AIMessage("The memory bank is in good shape."),
    ]


def test_transcript_round_trips_through_the_hf_parser(tokenizer) -> None:
    messages = episode()
    text, spans = assistant_spans(tokenizer, to_chat_dicts(messages))
    written = [m for m in messages if isinstance(m, AIMessage)]
    assert len(spans) == len(written)
    for (start, end), original in zip(spans, written, strict=True):
        reply = text[start:end]
        assert reply.endswith(END)
        parsed = hermes.to_ai_message(reply.removesuffix(END))
        assert parsed.content == original.content
        assert [(c["name"], c["args"]) for c in parsed.tool_calls] == [(c["name"], c["args"]) for c in original.tool_calls]
        assert parsed.invalid_tool_calls == []


def test_prompt_prefixes_are_what_the_hf_policy_sends(tokenizer) -> None:
    """Training renders each turn's context exactly as `HuggingFaceChatModel.render_prompt` does at inference."""
    policy = HuggingFaceChatModel(hf_model=None, tokenizer=tokenizer).bind_tools(tool_schemas())
    messages = episode()
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage):
            prompt = render_transcript(tokenizer, as_student_saw(to_chat_dicts(messages[:i]), {}), add_generation_prompt=True)
            assert prompt == policy.render_prompt(messages[:i])


def test_loss_mask_covers_assistant_tokens_only(tokenizer) -> None:
    chat = to_chat_dicts(episode())
    text = render_transcript(tokenizer, chat)
    ids, mask = tokenize_with_mask(tokenizer, chat)
    # Independently of the renderer: each assistant turn starts after "<|im_start|>assistant\n" and runs to
    # its "<|im_end|>" inclusive.
    expected_spans, pos = [], 0
    while (found := text.find("<|im_start|>assistant\n", pos)) != -1:
        start = found + len("<|im_start|>assistant\n")
        end = text.index(END, start) + len(END)
        expected_spans.append((start, end))
        pos = end
    assert len(expected_spans) == 3
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert len(offsets) == len(ids) == len(mask)
    for token, (s, e), masked in zip(ids, offsets, mask, strict=True):
        inside = any(start <= s and e <= end for start, end in expected_spans)
        assert masked == inside, (tokenizer.decode([token]), s, e)
    # The trained tokens spell exactly the assistant's turns (decoded together: a byte-level token can
    # hold half of a character such as "é").
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained == "".join(text[s:e] for s, e in expected_spans)
    assert "<tool_response>" not in trained and "Memory bank" not in trained and "<|im_start|>" not in trained
    assert trained.count(END) == 3


def test_truncation_keeps_the_start(tokenizer) -> None:
    chat = to_chat_dicts(episode())
    ids, mask = tokenize_with_mask(tokenizer, chat)
    short_ids, short_mask = tokenize_with_mask(tokenizer, chat, max_length=50)
    assert short_ids == ids[:50] and short_mask == mask[:50]


def test_template_that_rewrites_history_is_a_clear_error(tokenizer) -> None:
    rewriting = train_tokenizer()
    # A template that numbers the turns at the top: a turn's rendering is no continuation of its prefix.
    rewriting.chat_template = "{{ messages | length }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    with pytest.raises(MemupdateError, match="continuation.*Qwen2.5-style"):
        tokenize_with_mask(rewriting, to_chat_dicts(episode()))


@pytest.mark.slow  # about a minute on two shared cores
@pytest.mark.parametrize("lora_rank", [0, 4])
def test_finetune_learns_the_turns_and_saves_a_plain_checkpoint(tmp_path, lora_rank: int) -> None:
    """A few steps on two trajectories lower the assistant-token loss; with LoRA the adapters are merged,
    so the output is a plain checkpoint the `hf` policy loads."""
    from memupdate.rl.distill.finetune import TrainConfig, finetune
    from memupdate.rl.distill.tiny_student import build_tiny_checkpoint

    start = build_tiny_checkpoint(tmp_path / "start", hidden_size=32, layers=1)
    examples = [(to_chat_dicts(episode()), 1.0), (to_chat_dicts(episode()[:4]), 1.0)]
    config = TrainConfig(epochs=12, batch_size=2, learning_rate=1e-2, lora_rank=lora_rank, top_layers=0, warmup_steps=0, max_length=4096)
    out = tmp_path / "out"
    training = finetune(start, out, examples, [], config)
    assert training["examples"] == 2 and training["steps"] == 12
    if lora_rank == 0:  # a random-init base learns slowly through rank-4 adapters: only the full run is judged
        assert training["loss_last"] < 0.8 * training["loss_first"]
    assert not (out / "adapter_config.json").exists()
    loaded = HuggingFaceChatModel.from_pretrained(out)
    assert loaded.tokenizer.chat_template and loaded.hf_model.config.num_hidden_layers == 1
    before = HuggingFaceChatModel.from_pretrained(start).hf_model.state_dict()
    after = loaded.hf_model.state_dict()
    assert set(after) == set(before)  # same parameter names: adapters merged, not saved beside
    assert any(not torch.equal(before[name], after[name]) for name in before if "proj" in name)
