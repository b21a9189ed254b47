"""PostgresMemoryStore (LangGraph's BaseStore) against the real embedded PostgreSQL + pgvector and the real
packaged embedding model: nothing is mocked. Every test writes under its own `namespace` fixture, which
the `store` fixture drops afterwards, subtree included."""

from __future__ import annotations

import json
import uuid

import pytest
from langgraph.func import entrypoint
from langgraph.store.base import PutOp, SearchOp
from langmem import create_manage_memory_tool, create_search_memory_tool

from memupdate.store import InvalidNamespace, MemoryStore, as_langgraph_store
from memupdate.store.langgraph_store import VALUE_KEY, PostgresMemoryStore
from memupdate.store.models import MAX_CONTENT_CHARS

FOODS = {
    "sushi": {"content": "Alice loves sushi and ramen", "topic": "food", "rank": 1},
    "pizza": {"content": "Bob orders pizza every Friday", "topic": "food", "rank": 2},
    "hike": {"content": "Alice went hiking in the Alps last summer", "topic": "travel", "rank": 3},
}


@pytest.fixture
def lg(store: MemoryStore) -> PostgresMemoryStore:
    """The adapter on the test database; `store` (MemoryStore) cleans every namespace under the fixture's."""
    return PostgresMemoryStore.from_memory_store(store)


def ops_of(store: MemoryStore, namespace: tuple[str, ...]) -> list[str]:
    return [event.op for event in store.scoped(namespace).events()]


def test_put_get_delete_roundtrip(lg: PostgresMemoryStore, store: MemoryStore, namespace) -> None:
    value = {"content": "Alice prefers dark mode", "theme": "dark", "tags": ["ui", "prefs"]}
    lg.put(namespace, "prefs", value)
    item = lg.get(namespace, "prefs")
    assert (item.namespace, item.key, item.value) == (namespace, "prefs", value)
    assert item.created_at == item.updated_at and item.created_at.tzinfo is not None

    row = store.get("prefs")
    assert (row.content, row.kind, row.metadata) == ("Alice prefers dark mode", "semantic", {VALUE_KEY: value})

    lg.put(namespace, "prefs", {"content": "Alice prefers light mode", "theme": "light"})
    updated = lg.get(namespace, "prefs")
    assert updated.value == {"content": "Alice prefers light mode", "theme": "light"}
    assert updated.created_at == item.created_at and updated.updated_at > item.updated_at
    assert store.count() == 1, "a put on an existing key updates the row in place"

    lg.delete(namespace, "prefs")
    assert lg.get(namespace, "prefs") is None
    lg.delete(namespace, "prefs")  # deleting a missing key is a no-op, as in InMemoryStore
    assert ops_of(store, namespace) == ["create", "update", "delete"]
    before, after = store.events()[1].before, store.events()[1].after
    assert before["content"] == "Alice prefers dark mode" and after["content"] == "Alice prefers light mode"


def test_what_is_embedded_and_stored_as_content(lg: PostgresMemoryStore, store: MemoryStore, namespace) -> None:
    lg.put(namespace, "json", {"title": "Trip to Kyoto", "days": 5})
    lg.put(namespace, "fields", {"title": "Trip to Lisbon", "notes": "ignored"}, index=["title"])
    lg.put(namespace, "unindexed", {"content": "Trip to Oslo"}, index=False)
    lg.put(namespace, "long", {"content": "x" * (MAX_CONTENT_CHARS + 10), "kind": "episodic"})

    rows = store.snapshot()
    assert rows["json"].content == json.dumps({"days": 5, "title": "Trip to Kyoto"})
    assert rows["fields"].content == "Trip to Lisbon"
    assert rows["unindexed"].content == "Trip to Oslo"
    assert len(rows["long"].content) == MAX_CONTENT_CHARS and rows["long"].kind == "episodic"
    assert lg.get(namespace, "long").value["content"] == "x" * (MAX_CONTENT_CHARS + 10), "value kept whole"

    hits = lg.search(namespace, query="Oslo trip", limit=10)
    assert [hit.key for hit in hits][-1] == "unindexed" and hits[-1].score is None, "no vector: last, unscored"
    assert all(hit.score is not None for hit in hits[:-1])


@pytest.fixture
def foods(lg: PostgresMemoryStore, namespace) -> dict[str, tuple[str, ...]]:
    """Three items under namespace/a (one of them one level deeper) and a decoy under namespace/b."""
    where = {"sushi": (*namespace, "a"), "pizza": (*namespace, "a", "deep"), "hike": (*namespace, "a")}
    for key, value in FOODS.items():
        lg.put(where[key], key, value)
    lg.put((*namespace, "b"), "decoy", {"content": "Alice loves sushi and ramen", "topic": "food"})
    return where


def test_search_with_query_scores_prefix_filter_limit_offset(lg: PostgresMemoryStore, namespace, foods) -> None:
    hits = lg.search((*namespace, "a"), query="Which Japanese food does Alice like?")
    assert [hit.key for hit in hits][0] == "sushi"
    assert {hit.key for hit in hits} == {"sushi", "pizza", "hike"}, "prefix includes deeper namespaces, not b"
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
    assert hits[0].namespace == (*namespace, "a") and hits[0].value == FOODS["sushi"]

    food = lg.search((*namespace, "a"), query="Which Japanese food does Alice like?", filter={"topic": "food"})
    assert [hit.key for hit in food] == ["sushi", "pizza"]
    page = lg.search((*namespace, "a"), query="Which Japanese food does Alice like?", limit=1, offset=1)
    assert [hit.key for hit in page] == [hits[1].key]
    whole = lg.search(namespace, query="sushi", filter={"topic": "food"})
    assert [hit.key for hit in whole] == ["sushi", "decoy", "pizza"], "equal texts tie; namespace then key decide"
    assert whole[0].score == pytest.approx(whole[1].score)


def test_search_filter_operators(lg: PostgresMemoryStore, namespace, foods) -> None:
    def keys(**filter) -> set[str]:
        return {hit.key for hit in lg.search(namespace, filter=filter)}

    assert keys(rank={"$gte": 2}) == {"pizza", "hike"}
    assert keys(rank={"$gt": 1, "$lt": 3}) == {"pizza"}
    assert keys(topic={"$ne": "food"}) == {"hike"}
    assert keys(topic={"$eq": "travel"}, rank=3) == {"hike"}
    assert keys(rank={"$gt": "1"}) == set(), "a string never orders against a number"
    with pytest.raises(ValueError, match=r"\$like"):
        keys(topic={"$like": "f%"})


def test_search_without_query_newest_first(lg: PostgresMemoryStore, namespace, foods) -> None:
    hits = lg.search((*namespace, "a"))
    assert [hit.key for hit in hits] == ["hike", "pizza", "sushi"], "most recently updated first"
    assert all(hit.score is None for hit in hits)
    lg.put(foods["sushi"], "sushi", {**FOODS["sushi"], "rank": 0})
    assert [hit.key for hit in lg.search((*namespace, "a"), limit=2)] == ["sushi", "hike"]
    assert [hit.key for hit in lg.search((*namespace, "a"), limit=2, offset=2)] == ["pizza"]


def test_list_namespaces(lg: PostgresMemoryStore, namespace) -> None:
    for path in [("a", "x"), ("a", "y", "z"), ("b", "x"), ("b",)]:
        lg.put((*namespace, *path), "k", {"content": "something"})
    everything = [(*namespace, "a", "x"), (*namespace, "a", "y", "z"), (*namespace, "b"), (*namespace, "b", "x")]
    assert lg.list_namespaces(prefix=namespace) == everything
    assert lg.list_namespaces(prefix=(*namespace, "a")) == everything[:2]
    assert lg.list_namespaces(prefix=namespace, suffix=("x",)) == [everything[0], everything[3]]
    assert lg.list_namespaces(prefix=(*namespace, "*", "x")) == [everything[0], everything[3]], "wildcard label"
    assert lg.list_namespaces(prefix=namespace, max_depth=len(namespace) + 1) == [
        (*namespace, "a"),
        (*namespace, "b"),
    ], "truncated to max_depth and deduplicated"
    assert lg.list_namespaces(prefix=namespace, limit=2, offset=1) == everything[1:3]
    assert namespace[:1] in lg.list_namespaces(max_depth=1)


def test_memory_store_rows_are_visible_and_vice_versa(lg: PostgresMemoryStore, store: MemoryStore, namespace) -> None:
    written = store.create("Caroline moved from Sweden 4 years ago", metadata={"speaker": "Caroline"})
    item = lg.get(namespace, written.key)
    assert item.value == {"content": written.content, "kind": "semantic", "speaker": "Caroline"}
    assert (item.created_at, item.updated_at) == (written.created_at, written.updated_at)
    hit = lg.search(namespace, query="Where is Caroline from?", filter={"speaker": "Caroline"})[0]
    assert hit.key == written.key and hit.score > 0.3

    lg.put(namespace, "melanie", {"content": "Melanie ran a charity race for mental health"})
    assert store.get("melanie").content == "Melanie ran a charity race for mental health"
    assert store.search("Who ran a race?", top_k=1)[0].memory.key == "melanie", "embedded by the adapter"

    lg.put(namespace, written.key, {**item.value, "speaker": "Mel"})  # read-modify-write keeps the memory whole
    assert lg.get(namespace, written.key).value == {**item.value, "speaker": "Mel"}
    assert store.get(written.key).content == written.content
    assert ops_of(store, namespace) == ["create", "create", "update"]


async def test_async_put_search_get_delete(lg: PostgresMemoryStore, store: MemoryStore, namespace) -> None:
    await lg.aput(namespace, "cat", {"content": "Nate adopted a black cat named Luna"})
    await lg.aput(namespace, "car", {"content": "Nate sold his old car"})
    hits = await lg.asearch(namespace, query="What pet does Nate have?")
    assert hits[0].key == "cat" and hits[0].score > hits[1].score
    assert (await lg.aget(namespace, "car")).value == {"content": "Nate sold his old car"}
    await lg.adelete(namespace, "car")
    assert await lg.aget(namespace, "car") is None
    assert await lg.alist_namespaces(prefix=namespace) == [namespace]
    assert store.count() == 1


def test_bad_namespace_is_a_clear_error_and_writes_nothing(
    lg: PostgresMemoryStore, store: MemoryStore, namespace
) -> None:
    with pytest.raises(InvalidNamespace, match="'bad label'.*not allowed"):
        lg.put((*namespace, "bad label"), "k", {"content": "never stored"})
    with pytest.raises(InvalidNamespace, match="not allowed"):
        lg.batch([PutOp(namespace, "good", {"content": "stored only with its batch"}), PutOp(("a/b",), "k", {})])
    with pytest.raises(InvalidNamespace, match="1 to 8 labels"):
        lg.get(tuple("abcdefghi"), "k")
    with pytest.raises(ValueError, match=r"\$like"):  # fails after the put ran: the batch's transaction rolls back
        lg.batch([PutOp(namespace, "good", {"content": "rolled back"}), SearchOp(namespace, {"a": {"$like": "x"}})])
    assert store.count() == 0 and store.events() == []
    assert lg.list_namespaces(prefix=namespace) == []


def test_constructors(store: MemoryStore, engine, embedder) -> None:
    assert isinstance(as_langgraph_store(store), PostgresMemoryStore)
    direct = PostgresMemoryStore(engine, embedder, index={"dims": embedder.dims, "fields": ["text"]})
    assert direct.fields == ["text"]
    assert isinstance(PostgresMemoryStore.connect(engine.url, embedder), PostgresMemoryStore)
    with pytest.raises(ValueError, match="embedder="):
        PostgresMemoryStore(engine, embedder, index={"dims": embedder.dims, "embed": "openai:text-embedding-3-small"})


def test_langmem_tools_in_an_entrypoint(lg: PostgresMemoryStore, store: MemoryStore, namespace) -> None:
    """LangMem's tools, unchanged, find the store through `get_store()` inside a LangGraph entrypoint."""
    tools = {
        "manage": create_manage_memory_tool(namespace=(*namespace, "{langgraph_user_id}")),
        "search": create_search_memory_tool(namespace=(*namespace, "{langgraph_user_id}")),
    }

    @entrypoint(store=lg)
    def call_tool(request: dict) -> str:
        return tools[request["tool"]].invoke(request["args"])

    config = {"configurable": {"langgraph_user_id": "alice"}}
    memories = store.scoped((*namespace, "alice"))

    created = call_tool.invoke({"tool": "manage", "args": {"content": "Alice is allergic to peanuts"}}, config)
    key = created.removeprefix("created memory ")
    assert str(uuid.UUID(key)) == key
    assert memories.get(key).content == "Alice is allergic to peanuts"

    update = {"content": "Alice is allergic to peanuts and shellfish", "action": "update", "id": key}
    assert call_tool.invoke({"tool": "manage", "args": update}, config) == f"updated memory {key}"
    assert memories.get(key).content == "Alice is allergic to peanuts and shellfish"

    found = json.loads(call_tool.invoke({"tool": "search", "args": {"query": "What can't Alice eat?"}}, config))
    assert [(hit["key"], hit["value"]) for hit in found] == [(key, {"content": update["content"]})]
    assert found[0]["namespace"] == [*namespace, "alice"] and found[0]["score"] > 0.3

    deleted = call_tool.invoke({"tool": "manage", "args": {"action": "delete", "id": key}}, config)
    assert deleted == f"Deleted memory {key}"
    assert memories.count() == 0
    assert [event.op for event in memories.events()] == ["create", "update", "delete"]


async def test_langmem_tools_given_the_store(lg: PostgresMemoryStore, store: MemoryStore, namespace) -> None:
    """Outside a graph LangMem takes the store as `store=`; the async tool paths run too."""
    manage = create_manage_memory_tool(namespace=namespace, store=lg)
    search = create_search_memory_tool(namespace=namespace, store=lg, response_format="content_and_artifact")
    created = await manage.ainvoke({"content": "Bob's favourite band is Radiohead"})
    key = created.removeprefix("created memory ")
    message = await search.ainvoke(
        {"type": "tool_call", "id": "call-1", "name": search.name, "args": {"query": "Which music does Bob like?"}}
    )
    assert [item.key for item in message.artifact] == [key]
    assert store.get(key).content == "Bob's favourite band is Radiohead"
