"""MemoryStore against a real embedded PostgreSQL + pgvector and the real packaged embedding model."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import func, select

from memupdate.store import (
    EmbeddingDimensionMismatch,
    InvalidMemory,
    InvalidNamespace,
    MemoryNotFound,
    MemoryStore,
    NewMemory,
)
from memupdate.store.embeddings import CachedEmbedder
from memupdate.store.models import MAX_CONTENT_CHARS, Memory, MemoryEvent

FACTS = [
    "Caroline moved from Sweden four years ago",
    "Melanie painted a lake sunrise in 2022",
    "Caroline is researching adoption agencies",
    "Melanie ran a charity race for mental health",
    "Caroline attended an LGBTQ support group on 7 May 2023",
]


def row_counts(store: MemoryStore) -> tuple[int, int]:
    """Memories and event rows in the store's namespace, read straight from the tables."""
    with store.engine.connect() as conn:
        memories = conn.execute(select(func.count()).select_from(Memory).where(Memory.namespace == store.path))
        events = conn.execute(select(func.count()).select_from(MemoryEvent).where(MemoryEvent.namespace == store.path))
        return memories.scalar_one(), events.scalar_one()


@pytest.fixture
def filled(store: MemoryStore) -> MemoryStore:
    store.create_many(
        [NewMemory(fact, metadata={"dia_ids": [f"D1:{i}"], "date": f"2023-05-0{i + 1}"}) for i, fact in enumerate(FACTS)]
    )
    return store


def test_create_get_update_delete_roundtrip(store: MemoryStore) -> None:
    created = store.create("Caroline likes hiking", kind="episodic", metadata={"speaker": "Caroline"})
    assert store.get(created.key) == created
    updated = store.update(created.key, content="Caroline likes hiking in the Alps")
    assert updated.content == "Caroline likes hiking in the Alps"
    assert updated.metadata == {"speaker": "Caroline"}, "metadata kept when not given"
    assert updated.updated_at >= created.updated_at
    assert store.search("Alps", top_k=1)[0].memory.key == created.key, "content change re-embedded"
    store.delete(created.key)
    assert store.count() == 0
    with pytest.raises(MemoryNotFound, match=created.key):
        store.get(created.key)


def test_search_ranks_by_similarity_with_scores(filled: MemoryStore) -> None:
    hits = filled.search("Where did Caroline live before?", top_k=3)
    assert [h.memory.content for h in hits][0] == FACTS[0]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    assert len(filled.search("anything", top_k=50)) == len(FACTS)


def test_sample_strategies(filled: MemoryStore) -> None:
    assert filled.sample("random", 3, seed=1) == filled.sample("random", 3, seed=1)
    assert len({m.key for m in filled.sample("random", 3, seed=2)}) == 3
    recent = filled.sample("recent", 2)
    assert [m.content for m in recent] == [FACTS[4], FACTS[3]], "latest session date first"
    diverse = filled.sample("diverse", 3, seed=0)
    assert len({m.key for m in diverse}) == 3
    assert len(filled.sample("diverse", 99)) == len(FACTS)
    with pytest.raises(InvalidMemory, match="strategy"):
        filled.sample("newest", 2)  # type: ignore[arg-type]


def test_count_list_snapshot_and_namespaces(filled: MemoryStore) -> None:
    assert filled.count() == len(FACTS)
    assert [m.content for m in filled.list()] == FACTS
    assert [m.content for m in filled.list(limit=2, offset=1)] == FACTS[1:3]
    assert set(filled.snapshot()) == {m.key for m in filled.list()}
    child = filled.scoped((*filled.namespace, "child"))
    child.create("a memory below the namespace")
    counts = filled.list_namespaces(prefix=filled.namespace, with_counts=True)
    assert counts == {filled.namespace: len(FACTS), child.namespace: 1}


def test_fork_copies_embeddings_and_is_isolated(filled: MemoryStore) -> None:
    base_before = filled.snapshot()
    fork = filled.fork((*filled.namespace, "traj", "a"))
    sibling = filled.fork((*filled.namespace, "traj", "b"))
    assert fork.snapshot().keys() == base_before.keys()
    with filled.engine.connect() as conn:
        pairs = conn.execute(
            select(Memory.key, Memory.embedding).where(Memory.namespace.in_([filled.path, fork.path]))
        ).all()
    by_key: dict[str, list[np.ndarray]] = {}
    for key, embedding in pairs:
        by_key.setdefault(key, []).append(np.asarray(embedding))
    assert all(np.array_equal(a, b) for a, b in by_key.values()), "embeddings copied, not recomputed"

    key = next(iter(base_before))
    fork.update(key, content="Caroline moved from Sweden in 2019")
    fork.delete(list(base_before)[1])
    fork.create("a new memory only in the fork")
    assert filled.snapshot() == base_before, "writes to a fork never reach the base"
    assert sibling.snapshot().keys() == base_before.keys() and sibling.get(key).as_event() == filled.get(key).as_event()
    diff = filled.diff(fork)
    assert diff.changed == [key] and diff.removed == [list(base_before)[1]] and len(diff.added) == 1
    assert filled.diff(sibling).is_empty
    # Identical namespaces rank identically: the reward's no-op case depends on it.
    query = "What did Caroline research?"
    assert [h.memory.key for h in filled.search(query)] == [h.memory.key for h in sibling.search(query)]


def test_fork_refuses_non_empty_target_and_itself(filled: MemoryStore) -> None:
    target = (*filled.namespace, "traj", "x")
    filled.fork(target)
    with pytest.raises(InvalidNamespace, match="already has memories"):
        filled.fork(target)
    with pytest.raises(InvalidNamespace, match="onto itself"):
        filled.fork(filled.namespace)


def test_drop_removes_memories_and_events(filled: MemoryStore) -> None:
    fork = filled.fork((*filled.namespace, "traj", "d"))
    fork.create("extra")
    assert fork.drop() == len(FACTS) + 1
    assert row_counts(fork) == (0, 0)
    assert filled.count() == len(FACTS)


def test_event_log_records_every_write(store: MemoryStore) -> None:
    episode_store = store.scoped(store.namespace, episode="ep-1")
    a = episode_store.create("first")
    episode_store.update(a.key, content="first, edited")
    b, c = episode_store.create_many([NewMemory("second"), NewMemory("third")])
    merged = episode_store.replace([b.key, c.key], [NewMemory("second and third")])
    episode_store.delete(a.key)
    log = episode_store.events()
    assert [(e.op, e.memory_key) for e in log] == [
        ("create", a.key),
        ("update", a.key),
        ("create", b.key),
        ("create", c.key),
        ("delete", b.key),
        ("delete", c.key),
        ("create", merged[0].key),
        ("delete", a.key),
    ]
    assert log[1].before["content"] == "first" and log[1].after["content"] == "first, edited"
    assert {e.episode for e in log} == {"ep-1"}


def test_a_delete_carries_its_final_record_in_one_transaction(store: MemoryStore, monkeypatch) -> None:
    stale = store.create("Alice is vegetarian", metadata={"date": "2026-11-01"})
    removed = store.delete(stale.key, final_metadata={"date": "2026-11-01", "superseded_by": "m1"})
    assert removed.metadata["superseded_by"] == "m1" and store.count() == 0
    update, delete = store.events()[1:]
    assert (update.op, delete.op) == ("update", "delete") and update.before["metadata"] == {"date": "2026-11-01"}
    assert delete.before["metadata"]["superseded_by"] == "m1" and delete.after is None

    kept = store.create("Alice eats fish")
    before = row_counts(store)
    with pytest.raises(MemoryNotFound):
        store.delete("nope", final_metadata={"superseded_by": kept.key})
    # The delete fails after the metadata was written: the update rolls back with it.
    monkeypatch.setattr(MemoryStore, "_in_order", lambda self, keys, rows: (_ for _ in ()).throw(RuntimeError("cut")))
    with pytest.raises(RuntimeError, match="cut"):
        store.delete(kept.key, final_metadata={"superseded_by": "m1"})
    monkeypatch.undo()
    assert row_counts(store) == before and store.get(kept.key).metadata == {}


def test_bad_inputs_raise_clear_errors_and_write_nothing(store: MemoryStore) -> None:
    kept = store.create("kept")
    before = row_counts(store)
    other = store.scoped((*store.namespace, "other"))
    foreign = other.create("in another namespace")
    cases = [
        (lambda: store.create(""), InvalidMemory, "empty"),
        (lambda: store.create("x" * (MAX_CONTENT_CHARS + 1)), InvalidMemory, str(MAX_CONTENT_CHARS)),
        (lambda: store.create("x", kind="dream"), InvalidMemory, "dream"),
        (lambda: store.create("x", key="has space"), InvalidMemory, "key"),
        (lambda: store.create("dup", key=kept.key), InvalidMemory, "already exists"),
        (lambda: store.update("nope", content="y"), MemoryNotFound, "nope"),
        (lambda: store.update(kept.key, content="   "), InvalidMemory, "empty"),
        (lambda: store.delete(foreign.key), MemoryNotFound, store.path),
        # A merge whose second source is unknown must not delete the first one.
        (lambda: store.replace([kept.key, "missing"], [NewMemory("merged")]), MemoryNotFound, "missing"),
        (lambda: store.replace([kept.key, kept.key], [NewMemory("merged")]), InvalidMemory, "twice"),
        (lambda: store.replace([kept.key], [NewMemory("ok"), NewMemory("")]), InvalidMemory, "empty"),
        (lambda: store.search("q", top_k=0), InvalidMemory, "top_k"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert row_counts(store) == before
    assert store.get(kept.key).content == "kept"


@pytest.mark.parametrize("label", ["", "a/b", "has space", "-lead", "x" * 65, "tab\t", "ünï"])
def test_odd_namespaces_are_refused(store: MemoryStore, label: str) -> None:
    with pytest.raises(InvalidNamespace, match="namespace"):
        store.scoped(("ok", label))
    with pytest.raises(InvalidNamespace):
        store.scoped(tuple("abcdefghi"))


def test_wrong_vector_size_is_caught_with_both_sizes(engine, namespace) -> None:
    wide = CachedEmbedder("wide-test-model", 768, lambda texts: np.ones((len(texts), 768)))
    with pytest.raises(EmbeddingDimensionMismatch, match=r"768-dim .* holds 384"):
        MemoryStore(engine, wide, namespace)


def test_embedder_checks_what_the_model_returns() -> None:
    liar = CachedEmbedder("liar", 384, lambda texts: np.ones((len(texts), 12)))
    with pytest.raises(Exception, match=r"shape \(1, 12\)"):
        liar.embed(["x"])


def test_diverse_sample_spreads_over_topics(store: MemoryStore) -> None:
    dog = ["Caroline walks her dog every morning", "Caroline's dog loves morning walks",
           "Every morning Caroline takes her dog for a walk", "Caroline and her dog walk each morning"]
    store.create_many([NewMemory(t) for t in [*dog, "Melanie ran a marathon in Boston", "The stock market fell sharply"]])
    for seed in range(4):
        picked = [m.content for m in store.sample("diverse", 3, seed=seed)]
        assert sum(p in dog for p in picked) == 1, picked


def test_part_of_a_namespace_is_forked_edited_and_folded_back(filled: MemoryStore) -> None:
    """`fork_keys` copies some keys (embeddings included) and names its source; `fold` moves the part's
    edits and their events back and drops the part; `version` is the base version a fork diff reads."""
    from memupdate.store.fork_diff import changes_from

    fork = filled.fork((*filled.namespace, "whole"))
    try:
        version = filled.version()
        assert version == changes_from(fork, filled).base_version and version.count == len(FACTS)
        keys, matrix = filled.vectors()
        assert keys == [m.key for m in filled.list()] and matrix.shape == (len(FACTS), filled.column_dims)
        assert set(filled.vectors_of(keys[:2])) == set(keys[:2])
        np.testing.assert_array_equal(filled.vectors_of(keys[:1])[keys[0]], matrix[0])
        part = fork.scoped((*filled.namespace, "whole-n0"), episode="n0")
        assert fork.fork_keys(part, keys[:2]) == 2 and part.forked_from() == fork.path
        assert fork.forked_from() == filled.path and filled.forked_from() is None
        with pytest.raises(InvalidNamespace, match="already has memories"):
            fork.fork_keys(part, keys[:1])
        part.update(keys[0], content="Caroline moved from Sweden in 2019")
        fork.fold(part)
        assert part.count() == 0 and part.events() == []
        assert fork.get(keys[0]).content == "Caroline moved from Sweden in 2019" and fork.count() == len(FACTS)
        assert [(e.op, e.memory_key, e.episode) for e in fork.events(op="update")] == [("update", keys[0], "n0")]
        assert filled.version() == version, "the base is untouched"
    finally:
        fork.drop()


def test_append_events_marks_the_log(store: MemoryStore) -> None:
    from memupdate.store import NewEvent

    marker = store.scoped(store.namespace, episode="watch")
    assert store.last_event("compacted") is None
    marker.append_events([NewEvent("compacted", after={"memories": 0})])
    created = store.create("Caroline likes hiking")
    last = store.last_event("compacted")
    assert last is not None and last.after == {"memories": 0} and last.episode == "watch"
    assert [e.memory_key for e in store.events(op="create", after=last.id)] == [created.key]
    assert store.events(op="create", after=store.last_event("create").id) == []


def test_a_bulk_insert_skips_present_keys_and_returns_the_rest_in_order(store: MemoryStore) -> None:
    """`create_many(skip_existing=True)` (an import's write) inserts what is new in one transaction, every
    created row returned in order, one event each; keys already present are left out."""
    items = [NewMemory(f"fact number {i}", key=f"s{i:03d}") for i in range(8)]
    made = store.create_many(items[:2], skip_existing=True) + store.create_many(items, skip_existing=True)
    assert [m.key for m in made] == [f"s{i:03d}" for i in range(8)]  # the second call skips the two present
    stored = store.vectors_of(["s005"])["s005"]  # written in pgvector's binary form: the very float32s
    assert np.array_equal(stored, np.asarray(store.embedder.embed(["fact number 5"])[0], dtype=np.float32))
    assert store.count() == 8 and len([e for e in store.events() if e.op == "create"]) == 8
