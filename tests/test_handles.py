"""Constrained decoding of memory handles (agent/policies/handles.py).

The decoding tests use the tiny Qwen2 built from a config (the `tiny_model` fixture): its weights are
random, so left free it writes garbage where a handle belongs, and under the constraint it must not.
"""

from __future__ import annotations

import json

import pytest
import torch
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from memupdate.agent.policies.handles import (
    DONE,
    OPEN,
    HandleConstraint,
    live_handles,
    named_by_reason,
    reason_state,
    scan,
    to_date,
)
from memupdate.agent.policies.hf import HuggingFaceChatModel

LIVE = frozenset({"f0012", "f0013", "f0101"})


@pytest.mark.parametrize(
    ("tail", "many", "state"),
    [
        ("", True, OPEN),
        (': ["f00', True, OPEN),
        (': ["f0012", "f0013"]', True, OPEN),  # closed: the call goes on after it
        (': ["f0012", "f0013"]}}', True, DONE),  # what follows the `}` is free
        (': ["f0012", "f0013"] \n, "reason": "x', True, DONE),
        (': ["f0012", "f0013"] "', True, None),
        (': ["f0012", "f001', True, OPEN),  # f0013 is left
        (': ["f0012", "f0012', True, None),  # named twice: refused before it is closed
        (': ["f0012"]', True, None),  # a merge needs two
        (': ["f0012", "f0099"', True, None),  # never shown
        (': ["f0012", "m9', True, None),
        (': ["f0012" "f0013"]', True, None),  # no comma
        (': "f0101"', False, OPEN),
        (': "f0101", "superseded_by": "f0012"', False, DONE),
        (': "f0101"\n"superseded_by": "f0101"', False, None),  # the same key again, no comma
        (': "f01', False, OPEN),
        (': ["f0101"]', False, None),  # memory_id takes one handle, not a list
        (': "x"', False, None),
    ],
)
def test_scan(tail, many, state):
    assert scan(tail, LIVE, many) == state


def _call(name: str, args: dict, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def test_live_handles_are_shown_and_not_yet_consumed():
    messages = [
        HumanMessage("Target question: where does Ann live?"),
        _call("search_memory", {"query": "Ann"}, "c1"),
        ToolMessage(
            "[f0012] 0.7 (2023-05-08) Ann lives in Berlin.\n[f0013] 0.6 Ann likes tea [laughs].\n[f0101] 0.5 x",
            tool_call_id="c1",
        ),
        _call("merge_memory", {"memory_ids": ["f0012", "f0013"]}, "c2"),
        ToolMessage(
            "merged 2 memories into [m1a2b3c4d] (2023-05-08) Ann lives in Berlin. Ann likes tea.",
            tool_call_id="c2",
        ),
        _call("delete_memory", {"memory_id": "f0101"}, "c3"),
        ToolMessage("error: unknown memory id 'f0101'", tool_call_id="c3"),  # did not run: f0101 stays
        _call("search_memory", {"query": "Bob"}, "c4"),
        ToolMessage("error: no such bank [b0001]", tool_call_id="c4"),  # an error shows nothing
    ]
    assert live_handles(messages) == {"m1a2b3c4d": "Ann lives in Berlin. Ann likes tea.", "f0101": "x"}
    messages += [
        _call("delete_memory", {"memory_id": "f0101"}, "c5"),
        ToolMessage("deleted [f0101]", tool_call_id="c5"),
    ]
    assert set(live_handles(messages)) == {"m1a2b3c4d"}
    imported = ToolMessage("[user:42.note] 0.4 Ann's own key, from a LangGraph store", tool_call_id="c6")
    assert live_handles([*messages, _call("search_memory", {"query": "x"}, "c6"), imported]) == {
        "m1a2b3c4d": "Ann lives in Berlin. Ann likes tea.",
        "user:42.note": "Ann's own key, from a LangGraph store",
    }


def _merge_value(policy: HuggingFaceChatModel, constrain: bool) -> str:
    """Greedy continuation of a merge call cut just inside its list, by the random-weight model."""
    tokenizer, model = policy.tokenizer, policy.hf_model
    prefix = tokenizer("<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    call = tokenizer(
        '<tool_call>\n{"name": "merge_memory", "arguments": {"memory_ids": [', return_tensors="pt"
    )["input_ids"]
    ids = torch.cat([prefix, call], dim=1)
    processors = [HandleConstraint(tokenizer, prefix.shape[1], dict.fromkeys(LIVE, ""))] if constrain else []
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=40, do_sample=False, logits_processor=processors, pad_token_id=0
        )
    return tokenizer.decode(out[0, prefix.shape[1] :], skip_special_tokens=True).split('"memory_ids"', 1)[1]


def test_constraint_keeps_a_random_model_on_live_distinct_handles(tiny_model):
    policy = HuggingFaceChatModel.from_pretrained(tiny_model)
    free = _merge_value(policy, constrain=False)
    assert scan(free, LIVE, many=True) is None, f"the test needs a model that goes wrong when free: {free!r}"

    value = _merge_value(policy, constrain=True)
    assert scan(value, LIVE, many=True) in (OPEN, DONE), value
    if "]" in value:
        named = json.loads(value[value.index("[") : value.index("]") + 1])
        assert len(set(named)) == len(named) >= 2 and set(named) <= LIVE


def test_a_call_goes_on_after_its_handle(tiny_model):
    """After a handle's value the constraint lets through only what goes on with the call (`,` or `}`): a
    random model, free, writes something else there."""
    policy = HuggingFaceChatModel.from_pretrained(tiny_model)
    tokenizer, model = policy.tokenizer, policy.hf_model
    prefix = tokenizer("<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    call = tokenizer('<tool_call>\n{"name": "delete_memory", "arguments": {"memory_id": "f0101"', return_tensors="pt")["input_ids"]
    ids = torch.cat([prefix, call], dim=1)

    def after(processors: list) -> str:
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=8, do_sample=False, logits_processor=processors, pad_token_id=0)
        return tokenizer.decode(out[0, prefix.shape[1] :], skip_special_tokens=True).split('"memory_id"', 1)[1]

    free = after([])
    assert scan(free, LIVE, many=False) is None, f"the test needs a model that goes wrong when free: {free!r}"
    constrained = after([HandleConstraint(tokenizer, prefix.shape[1], dict.fromkeys(LIVE, ""))])
    assert scan(constrained, LIVE, many=False) in (OPEN, DONE), constrained


def test_policy_constrains_only_a_memory_id_value(tiny_model, monkeypatch):
    """Through the chat model: a turn after a search result decodes under the constraint (same handles as
    `live_handles`), and a turn with no handle shown decodes exactly as it does unconstrained."""
    policy = HuggingFaceChatModel.from_pretrained(tiny_model, max_new_tokens=12)
    start = [HumanMessage("Target question: where does Ann live?")]
    free = policy.model_copy(update={"constrain_handles": False})
    assert policy.invoke(start).content == free.invoke(start).content

    seen = []
    original = HandleConstraint.__init__

    def spy(self, tokenizer, prompt_length, handles, *args, **kwargs):
        seen.append(handles)
        original(self, tokenizer, prompt_length, handles, *args, **kwargs)

    later = [
        *start,
        _call("search_memory", {"query": "Ann"}, "c1"),
        ToolMessage("[f0012] 0.7 Ann lives in Berlin.", tool_call_id="c1"),
    ]
    monkeypatch.setattr(HandleConstraint, "__init__", spy)
    policy.invoke(later)
    assert seen == [{"f0012": "Ann lives in Berlin."}]


LOOK = {
    "s000000": "The capital of Great Britain is London.",
    "s000033": "Thomas Kyd was born in the city of London.",
    "s000306": "Thomas Kyd was born in the city of Leeds.",
    "s000342": "Thomas Arne was born in the city of London.",
}


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ('{"reason": "update: Thomas Kyd was born in the city of", "memory_id": "', {"s000033", "s000306"}),
        ('{"reason": "update:  thomas kyd was BORN in", "memory_id": "', {"s000033", "s000306"}),  # words, any case
        ('{"reason": "update: Thomas", "memory_id": "', {"s000033", "s000306", "s000342"}),
        ('{"reason": "update: Thomas K", "memory_id": "', set()),  # a whole word or nothing
        ('{"reason": "update: The capital of Great Britain is", "memory_id": "', set()),  # one line: no pair
        ('{"reason": "Thomas Kyd was born in the city of", "memory_id": "', set()),  # no update label
        ('{"memory_id": "', set()),
    ],
)
def test_a_supersessions_reason_names_the_lines_it_begins(call, named):
    assert named_by_reason(call, LOOK) == named


@pytest.mark.parametrize(
    ("value", "state"),
    [
        ("", OPEN),
        ("upd", OPEN),  # may still become the label
        ("update: ", OPEN),
        ("update: thomas K", OPEN),  # words, any case, a word may be half written
        ("update: Thomas Kyd was born in the city of", OPEN),
        ('update: Thomas Kyd was born in the city of", "memory_id": "s0', DONE),
        ('update: Thomas Kyd was born in the city of" ', OPEN),  # closed: the call must go on
        ('update: Thomas Kyd was born in the city of "s000033", ', None),  # closed, and words after it
        ("update: Thomas\nKyd", None),  # a raw newline: no JSON string holds one
        ("update: Thomas \\u", None),  # words are written as they are: no `\u` escape, even one that
        ("update: Thomas \\u004B", None),  # would spell them ("Thomas K")
        ("update: Thomas\\u004 B", None),
        ("update: Thomas\\s000014", None),  # an escape JSON has not
        ('update: Thomas Kyd was born in the city of"}', None),  # closes the call with no handles
        ("update: Thomas  Kyd", None),  # words one space apart
        ("update: Thomas\u00a0Kyd", None),
        ('update: Thomas K"', None),  # closes on a whole word only
        ("update: Thomas Arne", None),  # one live line begins so: the call would name no pair
        ("update: Thomas Kydd", None),
        ('update: "', None),  # names nothing
        ("update: Thomas Kyd\\", None),  # a backslash no escape the lines hold goes on from
        ("wrong: a duplicate of another line", DONE),  # no update label: free
        ('updated twice", "memory_id": "', DONE),
    ],
)
def test_a_supersessions_reason_begins_two_live_lines(value, state):
    assert reason_state(value, LOOK) == state


def test_a_reason_escapes_only_what_json_must():
    """A quote in the lines is written `\\"`; the same quote as a `\\u` escape is refused."""
    texts = {"s000001": 'The motto of Kent is "Invicta"', "s000002": 'The motto of Kent is "Unconquered"'}
    assert reason_state('update: The motto of Kent is \\"', texts) == OPEN
    assert reason_state("update: The motto of Kent is \\", texts) == OPEN  # an escape not yet complete
    assert reason_state("update: The motto of Kent is \\u0022", texts) is None


def test_a_reason_after_its_handles_may_close_the_call():
    assert reason_state('update: Thomas Kyd was born in the city of"}', LOOK, last=True) == DONE


def test_a_supersessions_reason_keeps_to_words_two_live_lines_begin(tiny_model):
    """After `update: Thomas ` the model's best token (`Arne`'s first: one live line) is masked, `Kyd`'s (two) is
    not, and no token left would end the words two lines begin; the reason closes on a whole word only."""
    tokenizer = HuggingFaceChatModel.from_pretrained(tiny_model).tokenizer
    call = '<tool_call>\n{"name": "delete_memory", "arguments": {"reason": "update: Thomas '
    arne, kyd = tokenizer.encode("Arne")[0], tokenizer.encode("Kyd")[0]
    assert tokenizer.decode([arne]) != tokenizer.decode([kyd]), "the test needs the two names to start apart"
    scores = torch.zeros(1, len(tokenizer))
    scores[0, arne], scores[0, kyd] = 10.0, 5.0
    out = HandleConstraint(tokenizer, 0, LOOK)(tokenizer(call, return_tensors="pt")["input_ids"], scores.clone())
    assert out[0, arne] == float("-inf") and out[0, kyd] == 5.0
    kept = torch.nonzero(out[0] > float("-inf")).flatten().tolist()
    value = call.split('"reason": "', 1)[1]
    assert all(reason_state(value + tokenizer.decode([i]), LOOK) is not None for i in kept)

    def closes(written: str) -> bool:
        quote = tokenizer.encode('"')[0]
        ids = tokenizer(call.rsplit("update: ", 1)[0] + "update: " + written, return_tensors="pt")["input_ids"]
        scores = torch.zeros(1, len(tokenizer))
        scores[0, quote] = 10.0
        return HandleConstraint(tokenizer, 0, LOOK)(ids, scores)[0, quote] > float("-inf")

    assert closes("Thomas Kyd was born in the city of") and not closes("Thomas Kyd was born in the ci")
    free = HandleConstraint(tokenizer, 0, LOOK)(tokenizer(call.replace("update: ", "wrong: "), return_tensors="pt")["input_ids"], scores.clone())
    assert torch.equal(free, scores), "a reason without the update label is left free"


def _call_value(
    policy: HuggingFaceChatModel, written: str, tool: str = "delete_memory", datable: frozenset[str] = frozenset(), constrain: bool = True
) -> str:
    """Greedy continuation, under the constraint over `LOOK` (or free), of a call to `tool` written up to `written`."""
    tokenizer, model = policy.tokenizer, policy.hf_model
    prefix = tokenizer("<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    call = tokenizer(f'<tool_call>\n{{"name": "{tool}", "arguments": {written}', return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            torch.cat([prefix, call], dim=1),
            max_new_tokens=16,
            do_sample=False,
            logits_processor=[HandleConstraint(tokenizer, prefix.shape[1], LOOK, datable=datable)] if constrain else [],
            pad_token_id=0,
        )
    return tokenizer.decode(out[0, prefix.shape[1] :], skip_special_tokens=True)


def test_a_supersessions_handles_follow_its_reason(tiny_model):
    """The random-weight model, inside a supersession whose reason names Thomas Kyd's birthplace, writes a
    handle of one of those two lines, and then the other as the newer; with no reason, any live handle."""
    policy = HuggingFaceChatModel.from_pretrained(tiny_model)
    reason = '{"reason": "update: Thomas Kyd was born in the city of", '
    first = _call_value(policy, reason + '"memory_id": "').split('"memory_id": "', 1)[1][:7]
    assert first in {"s000033", "s000306"}, first
    (other,) = {"s000033", "s000306"} - {first}
    second = _call_value(policy, reason + f'"memory_id": "{first}", "superseded_by": "')
    assert second.split('"superseded_by": "', 1)[1][:7] == other
    free = _call_value(policy, '{"memory_id": "').split('"memory_id": "', 1)[1][:7]
    assert free in LOOK and free != first, f"the test needs a model whose free choice the reason changes: {free}"


def test_the_handles_to_date_are_those_last_shown_with_relative_time():
    """Marked in a look; a dating update shows its memory again without the mark; a merge consumes one."""
    messages = [
        _call("sample_memory", {"strategy": "recent", "k": 10}, "c1"),
        ToolMessage(
            "to date (relative time): [f0207] [f0002]\n[f0241] (2022-10-21) John enjoys seminars.\n"
            "[f0207] (2022-09-20; relative time) John's game launches next month.\n"
            "[f0002] (2022-01-23; relative time) John moved last week.\n[f0001] (2022-01-23) John likes tea.\n"
            "[f0003] 0.5 (2022-01-23; relative time) Ann met John yesterday.",
            tool_call_id="c1",
        ),
    ]
    assert to_date(messages, live_handles(messages)) == {"f0207", "f0002", "f0003"}
    messages += [
        _call("manage_memory", {"action": "update", "memory_id": "f0207"}, "c2"),
        ToolMessage("updated [f0207] (2022-09-20) John's game launches in October 2022.\nto date (relative time): [f0002]", tool_call_id="c2"),
        _call("merge_memory", {"memory_ids": ["f0003", "f0001"]}, "c3"),
        ToolMessage("merged 2 memories into [m1a2b3c4d] (2022-01-23) Ann met John yesterday. John likes tea.", tool_call_id="c3"),
    ]
    assert to_date(messages, live_handles(messages)) == {"f0002"}


def test_a_dating_update_names_a_memory_to_date(tiny_model):
    """The random-weight model, inside an update with no content, writes a handle the tool marked as
    holding relative time; with content first (a rewrite), or with nothing marked, any live handle."""
    policy = HuggingFaceChatModel.from_pretrained(tiny_model)
    dating = '{"action": "update", "memory_id": "'
    free = _call_value(policy, dating, "manage_memory").split('"memory_id": "', 1)[1][:7]
    assert free in LOOK, free
    marked = frozenset(LOOK) - {free}
    chosen = _call_value(policy, dating, "manage_memory", marked).split('"memory_id": "', 1)[1][:7]
    assert chosen in marked, f"the constraint moved the free choice {free} to a marked handle: {chosen}"
    rewrite = '{"action": "update", "content": "x", "memory_id": "'
    rewritten = [_call_value(policy, rewrite, "manage_memory", d).split('"memory_id": "', 1)[1][:7] for d in (frozenset(), marked)]
    assert rewritten[0] == rewritten[1] in LOOK
