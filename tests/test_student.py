"""The pretrained student's pieces without the pretrained model: its chat template (compact tools, prefix
stable), short prompts, the stepwise teacher, top-layer fine-tuning and the KV cache across turns.

Models here are tiny Qwen2s built from a config with a tokenizer trained locally (`memupdate.rl.distill.tiny_student`):
nothing is downloaded. The real SmolLM2 is exercised by the slow test in test_student_smollm2.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from transformers import AutoModelForCausalLM, AutoTokenizer

from memupdate.agent.policies.hf import HuggingFaceChatModel
from memupdate.agent.prompts import COMPACT_SYSTEM_PROMPT, system_prompt
from memupdate.errors import MemupdateError
from memupdate.llm import models
from memupdate.llm.chat import student_view, to_chat_dicts, trim_tool_result
from memupdate.llm.models import STUDENT_CHAT_TEMPLATE, get_model, resolve_model
from memupdate.rl.distill.finetune import TrainConfig, finetune
from memupdate.rl.distill.learn import spread
from memupdate.rl.distill.render import as_student_saw, render_transcript, student_tools, tokenize_with_mask
from memupdate.rl.distill.tiny_student import build_tiny_checkpoint
from memupdate.scoring.summaries import interval

TRANSCRIPT = [
    {"role": "system", "content": system_prompt()},
    {"role": "user", "content": "Memory bank: locomo/x\nTarget question: When did Ann move?"},
    {"role": "assistant", "content": '<tool_call>\n{"name": "search_memory", "arguments": {"query": "Ann move"}}\n</tool_call>'},
    {"role": "tool", "content": "[f0001] 0.80 (2023-05-08) Ann moved to Berlin last week.\n[f0002] 0.70 (2023-05-09) Ann likes tea."},
    {"role": "assistant", "content": "Done."},
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_student"), layers=3)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = STUDENT_CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def test_template_lists_tools_in_one_line_each_and_renders_prefixes_as_prefixes(tiny):
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    text = render_transcript(tokenizer, TRANSCRIPT)
    assert "- search_memory(query, top_k?): Find the memories most similar to a query\n" in text
    assert "- manage_memory(action=create|update, content?, memory_id?, kind?=episodic|semantic|procedural)" in text
    assert '"properties"' not in text  # no JSON schema
    assert text.count("<|im_start|>") == len(TRANSCRIPT)
    for i in range(1, len(TRANSCRIPT)):
        assert text.startswith(render_transcript(tokenizer, TRANSCRIPT[:i]))
    ids, mask = tokenize_with_mask(tokenizer, TRANSCRIPT)
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert "search_memory" in trained and "Done." in trained and "Berlin" not in trained
    schemas = "\n".join(json.dumps(t) for t in student_tools())
    assert len(text) < len(schemas)  # the whole transcript is shorter than the tools' schemas alone


def test_student_sees_short_system_prompt_and_trimmed_results():
    long = "\n".join(f"[f{i:04d}] 0.50 (2023-01-01) memory number {i} with some words" for i in range(40))
    trimmed = trim_tool_result(long, 300)
    assert len(trimmed) <= 304 and trimmed.endswith(" ...") and "\n[f0003]" in trimmed
    assert trim_tool_result("short", 300) == "short" and trim_tool_result(long, None) == long
    messages = [SystemMessage(system_prompt()), HumanMessage("task"), AIMessage("x"), ToolMessage(long, tool_call_id="c")]
    seen = student_view(to_chat_dicts(messages), COMPACT_SYSTEM_PROMPT, 300)
    assert seen[0]["content"] == COMPACT_SYSTEM_PROMPT and seen[3]["content"] == trimmed
    # Training renders a logged (full) trajectory exactly as the rollout showed it.
    settings = {"system_prompt": COMPACT_SYSTEM_PROMPT, "tool_result_chars": 300}
    assert as_student_saw(to_chat_dicts(messages), settings) == seen
    assert len(COMPACT_SYSTEM_PROMPT) < len(system_prompt()) / 2


def test_missing_wheel_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MemupdateError, match="make student"):
        get_model("smollm2", tmp_path / "m")
    with pytest.raises(MemupdateError, match="unknown model 'gpt5'.*smollm2"):
        get_model("gpt5")
    assert resolve_model(str(tmp_path)) == str(tmp_path)  # a folder is used as it is


def test_a_reader_split_over_wheels_is_joined_in_order_and_its_hash_checked(monkeypatch, tmp_path):
    """The reader's GGUF comes in six wheels: the parts are joined in order, and a part that is not the
    pinned one stops the build with the make target, leaving no joined file behind."""
    import hashlib
    from importlib.machinery import ModuleSpec

    for i, chunk in enumerate((b"GGUF-head-", b"middle-", b"tail"), 1):
        (tmp_path / f"part{i}" / "data").mkdir(parents=True)
        (tmp_path / f"part{i}" / "data" / f"p{i}.bin").write_bytes(chunk)
        (tmp_path / f"part{i}" / "__init__.py").write_text("")
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: ModuleSpec(name, None, origin=str(tmp_path / name / "__init__.py")))
    good = hashlib.sha256(b"GGUF-head-middle-tail").hexdigest()
    model = models.WheelModel("r", "Reader", ("w1==1", "w2==1", "w3==1"), tuple((f"part{i}", f"data/p{i}.bin") for i in (1, 2, 3)),
                              "Apache-2.0", "run `make reader`", sha256=good, student=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    folder, name = models._joined_gguf(model, models._part_files(model), scratch)
    assert (folder / name).read_bytes() == b"GGUF-head-middle-tail"
    (tmp_path / "part2" / "data" / "p2.bin").write_bytes(b"other-")
    with pytest.raises(MemupdateError, match=f"SHA-256 is .*, not {good[:12]}.*make reader"):
        models._joined_gguf(model, models._part_files(model), scratch)
    assert not (scratch / name).exists()
    (tmp_path / "part3" / "data" / "p3.bin").unlink()
    with pytest.raises(MemupdateError, match="missing from the installed wheel w3==1.*make reader"):
        models._part_files(model)


def test_top_layer_finetune_moves_the_loss_and_freezes_the_bottom(tiny, tmp_path):
    examples = [(TRANSCRIPT, 1.0)] * 4
    report = finetune(tiny, tmp_path / "out", examples, [TRANSCRIPT], TrainConfig(learning_rate=3e-3, epochs=3, batch_size=2, top_layers=1))
    assert report["held_out_loss"][-1] < report["held_out_loss"][0]
    before = AutoModelForCausalLM.from_pretrained(tiny)
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert torch.equal(before.model.layers[0].mlp.up_proj.weight, after.model.layers[0].mlp.up_proj.weight)
    assert not torch.equal(before.model.layers[-1].mlp.up_proj.weight, after.model.layers[-1].mlp.up_proj.weight)
    assert torch.equal(before.model.embed_tokens.weight, after.model.embed_tokens.weight)


def test_negative_weight_pushes_a_trajectory_down(tiny, tmp_path):
    """An advantage below the group's mean makes the trajectory rarer: compared with the same update
    without it, its assistant tokens lose probability (they share a prefix with the pulled-up one)."""
    harmful = [*TRANSCRIPT[:4], {"role": "assistant", "content": '<tool_call>\n{"name": "delete_memory", "arguments": {"memory_id": "f0001"}}\n</tool_call>'}]
    config = TrainConfig(learning_rate=3e-3, epochs=3, batch_size=2, top_layers=1)
    pulled = finetune(tiny, tmp_path / "pulled", [(TRANSCRIPT, 1.0)] * 2, [], config)
    pushed = finetune(tiny, tmp_path / "pushed", [(TRANSCRIPT, 1.0)] * 2 + [(harmful, -1.0)], [], config)
    assert (pulled["pushed_down"], pushed["pushed_down"]) == (0, 1)

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    ids, mask = tokenize_with_mask(tokenizer, harmful)
    ids, mask = torch.tensor([ids]), torch.tensor(mask[1:])

    def logps(path):
        logits = AutoModelForCausalLM.from_pretrained(path)(ids).logits[0, :-1][mask]
        return torch.log_softmax(logits, -1).gather(1, ids[0, 1:][mask].unsqueeze(1)).squeeze(1).detach()

    start, without, with_pushdown = logps(tiny), logps(tmp_path / "pulled"), logps(tmp_path / "pushed")
    assert (with_pushdown - start).sum() < (without - start).sum() - 1.0
    with pytest.raises(MemupdateError, match="positive weight"):
        finetune(tiny, tmp_path / "none", [(harmful, -1.0)], [], config)


def test_kv_cache_across_turns_gives_the_same_reply(tiny):
    messages = [SystemMessage("You edit memory."), HumanMessage("Ann moved to Berlin.")]
    replies = {}
    for reuse in (False, True):
        policy = HuggingFaceChatModel.from_pretrained(tiny, max_new_tokens=12).model_copy(update={"reuse_cache": reuse})
        first = policy.invoke(messages)
        second = policy.invoke([*messages, first, HumanMessage("And then?")])
        replies[reuse] = (first.content, second.content, policy._cache is not None)
    assert replies[True][:2] == replies[False][:2]
    assert replies[True][2] and not replies[False][2]


def test_spread_and_interval():
    assert spread(list(range(10)), 3) == [0, 3, 6] and spread([1, 2], 5) == [1, 2]
    ci = interval([0.0, 0.2, 0.4])
    assert ci["mean"] == pytest.approx(0.2) and ci["low"] < 0.2 < ci["high"]


def test_prose_limit_cuts_a_turn_without_a_tool_call(tiny):
    """A random tiny model never opens a <tool_call>: its turn stops at the prose limit, not max_new_tokens."""
    policy = HuggingFaceChatModel.from_pretrained(tiny, max_new_tokens=40)
    messages = [SystemMessage("You edit memory."), HumanMessage("Ann moved to Berlin.")]
    free = policy.invoke(messages).usage_metadata["output_tokens"]
    cut = policy.model_copy(update={"max_prose_tokens": 6}).invoke(messages).usage_metadata["output_tokens"]
    assert cut == 6 < free
