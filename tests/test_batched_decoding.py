"""Episodes that advance together (`agent/policies/batched.py`): batched turns equal lone ones.

The model is a tiny Qwen2 built from a config with a tokenizer trained locally (the `tiny_model` fixture of
conftest.py): nothing is downloaded. Its weights are random, so its text is arbitrary; it is loaded in
float64 so that a batch's different rounding cannot flip an argmax, and the tests compare the batched path
with `HuggingFaceChatModel` decoding alone (`generate`): same replies, same seeds, same KV reuse.
The real SmolLM2 is compared by `memupdate bench student`.
"""

from __future__ import annotations

import pytest
import torch
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from memupdate.agent.policies import with_seed
from memupdate.agent.policies.batched import advance_together, batched, decoder_for
from memupdate.agent.policies.hf import HuggingFaceChatModel


@tool
def search_memory(query: str, top_k: int = 8) -> str:
    """Find the memories most similar to a query."""
    return ""


@tool
def merge_memory(memory_ids: list[str]) -> str:
    """Merge memories into one."""
    return ""


TOOLS = [search_memory, merge_memory]
RESULT = "[f0001] 0.80 (2023-05-08) Ann moved to Berlin.\n[f0002] 0.70 (2023-05-09) Ann likes tea."


@pytest.fixture(scope="module")
def policy(tiny_model):
    return HuggingFaceChatModel.from_pretrained(tiny_model, max_new_tokens=12, dtype=torch.float64)


def conversation(i: int) -> list:
    return [SystemMessage("You maintain a memory database."), HumanMessage(f"Bank {i}: " + "Ann moved. " * i)]


def episode(turns: int):
    """A job: `turns` turns of one conversation, each reply followed by a tool result (handles shown)."""

    def run(model: HuggingFaceChatModel) -> list[tuple]:
        bound, messages, replies = model.bind_tools(TOOLS), conversation(turns), []
        for turn in range(turns):
            reply = bound.invoke(messages)
            replies.append((reply.content, reply.tool_calls, reply.usage_metadata["output_tokens"],
                            reply.response_metadata["prefill_tokens"]))
            call = AIMessage(reply.content, tool_calls=[{"name": "search_memory", "args": {"query": "Ann"}, "id": f"c{turn}"}])
            messages += [call, ToolMessage(RESULT, tool_call_id=f"c{turn}")]
        return replies

    return run


def alone(policies, jobs):
    return [job(policy) for policy, job in zip(policies, jobs, strict=True)]


def test_greedy_batched_turns_equal_lone_turns_and_an_episode_leaving_disturbs_none(policy):
    members = [policy.model_copy(update={"max_new_tokens": n, "max_prose_tokens": p}) for n, p in
               [(12, None), (5, None), (12, 4), (9, None)]]
    jobs = [episode(t) for t in (3, 1, 2, 3)]  # episodes of 1, 2 and 3 turns: two leave before the others end
    expected = alone(members, jobs)
    decoder = decoder_for(policy)
    before = len(decoder.batches)
    got = advance_together(members, jobs)
    assert [[r[:3] for r in e] for e in got] == [[r[:3] for r in e] for e in expected]
    assert decoder.batches[before:] == [4, 3, 2], "turns are batched; finished episodes leave"
    # A first turn copies the system turn's KV (prefilled once per decoder); a later turn prefills only
    # what is new since the episode's last turn, as decoding alone does.
    assert all(g[0][3] < e[0][3] for g, e in zip(got, expected, strict=True))
    assert [[r[3] for r in g[1:]] for g in got] == [[r[3] for r in e[1:]] for e in expected]


def test_seeded_samples_repeat_whoever_shares_the_batch(policy):
    sampler = policy.model_copy(update={"temperature": 1.0, "max_new_tokens": 10})

    def together(seeds):
        return advance_together([with_seed(sampler, s) for s in seeds], [episode(2)] * len(seeds))

    first = together([1, 2, 3])
    assert together([1, 2, 3]) == first
    assert together([5, 1])[1] == first[0], "a member's sample does not depend on its companions"
    assert first[0] != first[1]
    lone = alone([with_seed(sampler, 1)], [episode(2)])[0]
    assert [r[:3] for r in lone] == [r[:3] for r in first[0]], "the same sample as decoding alone"


def test_a_failing_episode_returns_its_error_and_the_others_finish(policy):
    def broken(model):
        model.bind_tools(TOOLS).invoke(conversation(1))
        raise RuntimeError("tool exploded")

    got = advance_together([policy] * 3, [episode(2), broken, episode(3)])
    assert isinstance(got[1], RuntimeError) and str(got[1]) == "tool exploded"
    assert [r[:3] for r in got[0]] == [r[:3] for r in alone([policy], [episode(2)])[0]]
    assert len(got[2]) == 3


def test_a_lone_policy_is_untouched_and_others_run_in_turn(policy):
    assert policy.batcher is None and batched(policy).batcher is decoder_for(policy)
    assert decoder_for(None) is None and advance_together([None, None], [lambda p: 1, lambda p: 2]) == [1, 2]
    alone_only = policy.model_copy(update={"batch_episodes": False})
    assert decoder_for(alone_only) is None
    assert advance_together([alone_only] * 2, [lambda p: p.batcher, lambda p: p.batcher]) == [None, None]


def test_run_episodes_through_the_graph_equal_run_episode(policy, store):
    from memupdate.agent.graph import run_episode, run_episodes

    store.create("Ann moved to Berlin in 2021.", key="f0000")
    store.create("Ann likes green tea.", key="f0001")
    questions = ["Where?", None, "Tea?"]
    forks = [store.fork((*store.namespace, f"f{i}")) for i in range(3)]
    expected = [run_episode(policy, fork, q, max_turns=2) for fork, q in zip(forks, questions, strict=True)]
    for fork in forks:  # the same names again: the bank's name is in the prompt
        fork.drop()
    forks = [store.fork((*store.namespace, f"f{i}")) for i in range(3)]
    got = run_episodes([policy] * 3, forks, questions, max_turns=2)
    for e, g in zip(expected, got, strict=True):
        assert [(m.type, m.content) for m in g.messages[2:]] == [(m.type, m.content) for m in e.messages[2:]]
        assert (g.turns, g.stop_reason, g.operations) == (e.turns, e.stop_reason, e.operations)
    for fork in forks:
        fork.drop()


def test_compact_bank_runs_neighbourhoods_together_with_the_replies_of_one_by_one(policy, store):
    from memupdate.agent.compaction import compact_bank, neighbourhood_episode

    for i, text in enumerate(["Ann moved to Berlin.", "Ann lives in Berlin.", "Bob likes tea.", "Bob drinks green tea.",
                              "Cleo paints.", "Cleo paints landscapes."]):
        store.create(text, key=f"f{i:04d}")
    together = compact_bank(policy, store, (*store.namespace, "together"), size=2, max_turns=2)
    alone_fork = store.fork((*store.namespace, "alone"))
    lone = [neighbourhood_episode(policy, alone_fork, group, f"n{i:05d}", max_turns=2)
            for i, group in enumerate(together.neighbourhoods)]
    assert together.episodes == len(lone) == 3 and not together.failed_episodes
    # From the first reply on (the task names its scratch bank, which differs):
    assert [[(m.type, m.content) for m in t[2:]] for t in together.messages] == [[(m.type, m.content) for m in e.messages[2:]] for e in lone]
    assert {k: m.content for k, m in together.fork.snapshot().items()} == {k: m.content for k, m in alone_fork.snapshot().items()}
    together.fork.drop()
    alone_fork.drop()


def test_a_participant_running_episodes_of_its_own_steps_aside(policy):
    """A job that itself runs episodes together (an evaluation unit compacting a whole bank) must not keep
    its own seat in the batch while it waits for them."""

    def nested(model):
        return advance_together([model, model], [episode(2), episode(1)])

    got = advance_together([policy, policy], [nested, episode(2)])
    assert [len(got[0][0]), len(got[0][1]), len(got[1])] == [2, 1, 2]


def test_a_decoder_keeps_no_model_alive(tiny_model):
    """The registry of decoders is weak both ways: once no policy uses a checkpoint, its model (and the
    decoder's prefix caches) can go. It kept every checkpoint an `rl learn` loaded, stage after stage."""
    import gc
    import weakref

    model = HuggingFaceChatModel.from_pretrained(tiny_model, max_new_tokens=4, dtype=torch.float64)
    assert advance_together([model, model], [episode(1), episode(1)])[0]
    alive = weakref.ref(model.hf_model)
    assert decoder_for(model).model is model.hf_model
    del model
    gc.collect()
    assert alive() is None
