"""Property tests (hypothesis) over the tools' arguments (issue 10, reliability tests): unknown and
foreign handles, huge and empty strings, unicode (NUL included), SQL-looking text, negative and huge k,
duplicate ids in a merge. Zero crashes; a failed call writes nothing; after any call the bank is what
its event log says, every memory has provenance and a 384-dim embedding. Real embedded PostgreSQL and
embedding model; `max_examples` is kept moderate for the default run."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import SQL_LOOKING, as_events, replay, vector_sizes

from memupdate.agent.tools import MEMORY_TOOLS, run_tool
from memupdate.store import MemoryStore, NewMemory
from memupdate.store.models import MAX_CONTENT_CHARS

FACTS = ["Caroline went to a support group on 7 May 2023", "Melanie painted a lake sunrise",
         "Melanie paints lake sunrises", "Caroline moved from Sweden", "Melanie ran a charity race"]

text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(SQL_LOOKING + ["", " ", "\x00", "a\x00b", "f0000\n", "🙂" * 30]),
    st.just("x" * (MAX_CONTENT_CHARS + 1)),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=200),
)
handle = st.one_of(
    st.sampled_from(["f0000", "f0001", "f0002", "f0003", "f0004"]),  # usually valid here
    st.sampled_from(["foreign1", "m00000000", "F0000", "f0000 ", "", "%", "_", "*"]),  # foreign or unknown
    text,
)
number = st.one_of(st.integers(-5, 25), st.sampled_from([-(2**63), 2**31, 10**12]), st.floats(allow_nan=True), text)
arguments = st.fixed_dictionaries(
    {},
    optional={
        "query": text,
        "top_k": number,
        "k": number,
        "action": st.sampled_from(["create", "update", "delete", "", None]),
        "content": st.one_of(text, st.none()),
        "memory_id": st.one_of(handle, st.none()),
        "memory_ids": st.one_of(st.lists(handle, max_size=5), st.lists(st.sampled_from(["f0000", "f0001"]), min_size=2, max_size=4)),
        "strategy": st.sampled_from(["random", "diverse", "recent", "summarize", "concatenate", "extract_common",
                                     "temporal", "thematic", "speaker", "bogus"]),
        "kind": st.sampled_from(["episodic", "semantic", "procedural", "other", ""]),
        "parts": st.one_of(st.lists(text, max_size=4), st.none()),
        "reason": text,
    },
)


@pytest.fixture
def bank(store: MemoryStore) -> MemoryStore:
    """A small bank, and a memory in a sibling namespace whose key (`foreign1`) must never work here."""
    store.scoped((*store.namespace, "other")).create("a memory of another bank", key="foreign1", metadata={"source": "t"})
    return store.scoped((*store.namespace, "bank"))


def refill(bank: MemoryStore) -> None:
    missing = [NewMemory(t, metadata={"source": "test", "dia_ids": [f"D1:{i}"]}, key=f"f{i:04d}")
               for i, t in enumerate(FACTS) if f"f{i:04d}" not in bank.snapshot()]
    if missing:
        bank.create_many(missing)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(list(MEMORY_TOOLS)), args=arguments)
def test_any_tool_call_is_safe(bank: MemoryStore, name: str, args: dict) -> None:
    refill(bank)
    before, events_before = as_events(bank), bank.events()
    result = run_tool(bank, name, args)  # must not raise, whatever the arguments
    assert result.text.startswith("error: ") != result.ok
    events = bank.events()
    if not result.ok or not MEMORY_TOOLS[name].writes:
        assert as_events(bank) == before and len(events) == len(events_before), "nothing written"
        return
    assert as_events(bank) == replay(before, events[len(events_before):]), "the bank is what its log says"
    assert vector_sizes(bank) == {384}
    assert all(m.metadata.get("source") for m in bank.list()), "provenance on every memory"
    assert "foreign1" not in as_events(bank)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.sampled_from(["f0000", "f0001", "f0002"]), min_size=2, max_size=6))
def test_merge_with_duplicate_ids_changes_nothing_or_merges_each_once(bank: MemoryStore, ids: list[str]) -> None:
    refill(bank)
    before = as_events(bank)
    result = run_tool(bank, "merge_memory", {"memory_ids": ids})
    if len(set(ids)) != len(ids) or len(set(ids)) < 2:
        assert not result.ok and as_events(bank) == before
    else:
        assert result.ok and not set(ids) & set(as_events(bank))
