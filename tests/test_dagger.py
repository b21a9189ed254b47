"""DAgger (`rl/distill/dagger.py`) on the real database: the rule labels each state a student visits, the
student's slips become imitation examples whose loss is on the rule's turn alone, and a learning run's
training units are first those where the rule's edits move a question."""

from __future__ import annotations

from types import SimpleNamespace

from langchain_core.messages import AIMessage
from scripted_chat import ScriptedModel
from transformers import AutoTokenizer

from memupdate.agent.compaction import neighbourhood_episode
from memupdate.llm.chat import to_chat_dicts
from memupdate.rl.data.ingest import load_bank
from memupdate.rl.distill.compaction import CompactionTask
from memupdate.rl.distill.dagger import (
    Labelled,
    Labels,
    as_turn,
    labelled_turns,
    relabelled,
    until_first_slip,
)
from memupdate.rl.distill.learn import LearnConfig, teacher
from memupdate.rl.distill.render import tokenize_with_mask
from memupdate.rl.distill.task import Rollout
from memupdate.scoring.reward import RewardConfig
from memupdate.store import MemoryStore, NewMemory

LOOK = ("sample_memory", {"strategy": "recent", "k": 10})
# The rule's supersession names the fact that changed first (its `reason`), then the pair.
SUPERSEDE = ("delete_memory", {"reason": "update: The chairman of Acme Corp is", "memory_id": "s000001", "superseded_by": "s000003"})


def _call(name: str, args: dict) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c-{name}-{len(args)}", "type": "tool_call"}])


def _bank(store: MemoryStore) -> list[str]:
    store.create_many([
        NewMemory("The chairman of Acme Corp is Ann Lee.", metadata={"time": "2000-01-01T01:00:00"}, key="s000001"),
        NewMemory("Bob Stone likes green tea.", metadata={"time": "2000-01-01T02:00:00"}, key="s000002"),
        NewMemory("The chairman of Acme Corp is Carl Diaz.", metadata={"time": "2000-01-01T03:00:00"}, key="s000003"),
    ])
    return ["s000001", "s000002", "s000003"]


def test_the_rule_labels_the_states_a_student_visits_and_its_slips_become_examples(store: MemoryStore, tiny_model) -> None:
    keys = _bank(store)
    rule = teacher(SimpleNamespace(config=LearnConfig(), task=CompactionTask(store, RewardConfig()), store=store), 0.0, 0.0).member(0)
    # The student looks as the rule does, then deletes a memory that needed nothing, then stops early.
    student = ScriptedModel(responses=[_call(*LOOK), _call("delete_memory", {"memory_id": "s000002"}), AIMessage("Done.")])
    policy = Labelled(student=student, teacher=rule, labels=Labels())
    episode = neighbourhood_episode(policy, store, keys, "e")

    # Each turn's label is the rule's action on the bank as the student left it: the stale chairman is
    # still there after the student's slip, so the rule's answer stays the supersession.
    assert [(turn, actions) for turn, actions in policy.labels.turns] == [(0, [LOOK]), (1, [SUPERSEDE]), (2, [SUPERSEDE])]
    assert set(store.snapshot()) == {"s000001", "s000003"}  # what the student did, not the rule

    labels = [[turn, [list(a) for a in actions]] for turn, actions in policy.labels.turns]
    record = Rollout("g", to_chat_dicts(episode.messages), 0.0, {}, facts={"teacher_labels": labels})
    examples = relabelled([record])
    assert len(examples) == 2  # turn 0 agreed; turns 1 and 2 are corrected
    assert [agreed for _, _, agreed in labelled_turns(record)] == [True, False, False]  # what the held-out agreement counts

    # Up to the first slip: the student's own look (agreed, so trained), then the rule's supersession where
    # the student deleted instead; the state after that slip teaches nothing.
    (first,) = until_first_slip([record])
    own = [m for m in first if m["role"] == "assistant"]
    assert len(own) == 2 and "loss" not in own[0] and own[0]["content"] == record.messages[2]["content"]
    assert own[1] == {"role": "assistant", "content": as_turn(SUPERSEDE)}
    for example, student_turns in zip(examples, (1, 2), strict=True):
        assert example[-1] == {"role": "assistant", "content": as_turn(SUPERSEDE)}
        kept = [m for m in example[:-1] if m["role"] == "assistant"]
        assert len(kept) == student_turns and all(m["loss"] is False for m in kept)

    # The loss is on the rule's turn alone: the student's own turns before it are context.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    ids, mask = tokenize_with_mask(tokenizer, examples[1])
    learnt = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert "superseded_by" in learnt and "s000002" not in learnt and "Done." not in learnt


def test_a_student_that_does_what_the_rule_does_gets_no_correction(store: MemoryStore) -> None:
    keys = _bank(store)
    rule = teacher(SimpleNamespace(config=LearnConfig(), task=CompactionTask(store, RewardConfig()), store=store), 0.0, 0.0).member(0)
    student = ScriptedModel(responses=[_call(*LOOK), _call(SUPERSEDE[0], {**SUPERSEDE[1], "reason": "stale"}), AIMessage("Nothing else to edit.")])
    policy = Labelled(student=student, teacher=rule, labels=Labels())
    episode = neighbourhood_episode(policy, store, keys, "e")
    assert [actions for _, actions in policy.labels.turns] == [[LOOK], [SUPERSEDE], []]  # []: the rule closes
    labels = [[turn, [list(a) for a in actions]] for turn, actions in policy.labels.turns]
    record = Rollout("g", to_chat_dicts(episode.messages), 0.0, {}, facts={"teacher_labels": labels})
    assert relabelled([record]) == [] and all(agreed for _, _, agreed in labelled_turns(record))
    assert until_first_slip([record]) == [record.messages]  # no slip: the rollout whole, the student's own turns trained


def test_any_edit_of_the_rules_plan_agrees(store: MemoryStore) -> None:
    # Two stale chairmen: the rule's plan supersedes both, and a student that starts with the second pair
    # is right, not corrected towards the rule's order.
    keys = [*_bank(store), "s000004", "s000005"]
    store.create_many([
        NewMemory("The chairman of Zeta Inc is Dan Moss.", metadata={"time": "2000-01-01T04:00:00"}, key="s000004"),
        NewMemory("The chairman of Zeta Inc is Eve Park.", metadata={"time": "2000-01-01T05:00:00"}, key="s000005"),
    ])
    other = ("delete_memory", {"reason": "update: The chairman of Zeta Inc is", "memory_id": "s000004", "superseded_by": "s000005"})
    rule = teacher(SimpleNamespace(config=LearnConfig(), task=CompactionTask(store, RewardConfig()), store=store), 0.0, 0.0).member(0)
    student = ScriptedModel(responses=[_call(*LOOK), _call(*other), _call(*SUPERSEDE), AIMessage("Nothing else to edit.")])
    policy = Labelled(student=student, teacher=rule, labels=Labels())
    episode = neighbourhood_episode(policy, store, keys, "e", max_turns=4)
    assert sorted(map(str, policy.labels.turns[1][1])) == sorted(map(str, [SUPERSEDE, other]))
    assert policy.labels.turns[2][1] == [SUPERSEDE] and policy.labels.turns[3][1] == []
    labels = [[turn, [list(a) for a in actions]] for turn, actions in policy.labels.turns]
    record = Rollout("g", to_chat_dicts(episode.messages), 0.0, {}, facts={"teacher_labels": labels})
    assert relabelled([record]) == [] and all(agreed for _, _, agreed in labelled_turns(record))
    assert until_first_slip([record]) == [record.messages]  # no slip: the rollout whole, the student's own turns trained
    # A slip is corrected towards the rule's first action, one of the two.
    slipped = [[1, labels[1][1]]]
    messages = to_chat_dicts([*episode.messages[:4], AIMessage("Done.")])  # the look and its result, then a stop
    (example,) = relabelled([Rollout("g", messages, 0.0, {}, facts={"teacher_labels": slipped})])
    assert example[-1]["content"] in {as_turn(SUPERSEDE), as_turn(other)}


def test_training_units_are_first_those_where_the_rule_moves_a_question(store: MemoryStore, sample) -> None:
    task = CompactionTask(store, RewardConfig(), size=6)
    every = task.training_units([sample], 0)
    base = load_bank(store, sample)
    moved = {u.group for u in every if task.rollout(task.rule(), base, u).reward != 0}
    assert 0 < len(moved) < len(every)
    chosen = task.training_units([sample], len(moved))
    assert {u.group for u in chosen} == moved
    topped_up = task.training_units([sample], len(moved) + 1)
    assert {u.group for u in topped_up} > moved and len(topped_up) == len(moved) + 1


def test_label_units_are_more_neighbourhoods_where_the_rule_edits_then_where_it_stops_at_once(store: MemoryStore, sample) -> None:
    task = CompactionTask(store, RewardConfig(), size=6)
    taken = task.training_units([sample], 2)
    labels = task.label_units([sample], 100, taken)
    assert labels and not {u.group for u in labels} & {u.group for u in taken}
    base = load_bank(store, sample)
    rule = task.rule()
    edits = {u.group: any(c["ok"] and c["name"] not in {"sample_memory", "search_memory"} for c in task.rollout(rule, base, u).calls)
             for u in labels}
    assert any(edits.values()) and not all(edits.values())  # the rule's stop is a label too
    first = task.label_units([sample], sum(edits.values()), taken)  # as many as it edits in: those first
    assert {u.group for u in first} == {g for g, edited in edits.items() if edited}
    assert len(task.label_units([sample], 1, taken)) == 1


def test_later_cuts_give_the_same_memories_in_other_company_and_never_a_neighbourhood_twice(store: MemoryStore, sample, monkeypatch) -> None:
    one_cut = CompactionTask(store, RewardConfig(), size=6)
    taken = one_cut.training_units([sample], 2)
    first = one_cut.label_units([sample], 100, taken)
    # A bank of one k-means cell is cut the same whatever the seed: nothing more.
    assert CompactionTask(store, RewardConfig(), size=6, label_cuts=2).label_units([sample], 100, taken) == first

    monkeypatch.setattr("memupdate.agent.compaction.CELL_SIZE", 12)  # cells of a dozen: each seed cuts otherwise
    one_cut, two_cuts = (CompactionTask(store, RewardConfig(), size=6, label_cuts=n) for n in (1, 2))
    taken = one_cut.training_units([sample], 2)
    first, both = one_cut.label_units([sample], 100, taken), two_cuts.label_units([sample], 100, taken)
    assert both[: len(first)] == first  # the first cut's units first, as with one cut (their kept-out eighths too)
    later = both[len(first) :]
    assert later and {u.cut for u in later} == {1} and all("/c1n" in u.group for u in later)
    seen = [frozenset(u.keys) for u in [*taken, *both]]
    assert len(set(seen)) == len(seen)  # a neighbourhood already taken is not taken again
    assert set().union(*(u.keys for u in later)) <= set(load_bank(store, sample).snapshot())
