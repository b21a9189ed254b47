"""The LangGraph adapter and the store hold where LangGraph's own store tests found them wrong (issue 10,
items 1-3): concurrent async writes apply in call order, non-finite filter values, trailing newlines in
labels and keys, LangGraph's exception and item types. Real embedded PostgreSQL and the real embedder;
InMemoryStore (LangGraph's reference store) gives the expected answers."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.base import InvalidNamespaceError, Item, SearchItem
from langgraph.store.memory import InMemoryStore

from memupdate.store import InvalidMemory, InvalidNamespace, MemoryStore, NewMemory, to_namespace
from memupdate.store.langgraph_store import PostgresMemoryStore

PRICES = {"cheap": 1.5, "mid": 20, "dear": 1000.25, "text": "n/a"}


@pytest.fixture
def lg(store: MemoryStore) -> PostgresMemoryStore:
    return PostgresMemoryStore.from_memory_store(store)


async def test_gathered_async_puts_apply_in_call_order(lg: PostgresMemoryStore, namespace) -> None:
    """LangGraph's ToolNode runs parallel tool calls with asyncio.gather: the later call must win, every time."""
    kept = []
    for round_ in range(20):
        key = f"k{round_}"
        await asyncio.gather(
            lg.aput(namespace, key, {"content": "first"}), lg.aput(namespace, key, {"content": "second"})
        )
        kept.append((await lg.aget(namespace, key)).value["content"])
    assert kept == ["second"] * 20


async def test_gathered_mixed_ops_see_earlier_writes(lg: PostgresMemoryStore, namespace) -> None:
    """A get gathered after a put reads that put; a delete gathered after a put removes it."""
    put, got = await asyncio.gather(lg.aput(namespace, "a", {"content": "alpha"}), lg.aget(namespace, "a"))
    assert got is not None and got.value == {"content": "alpha"}
    await asyncio.gather(lg.aput(namespace, "b", {"content": "beta"}), lg.adelete(namespace, "b"))
    assert await lg.aget(namespace, "b") is None


@pytest.mark.parametrize(
    "condition",
    [
        {"$lt": float("inf")},
        {"$lte": float("inf")},
        {"$gt": float("inf")},
        {"$gt": float("-inf")},
        {"$gte": float("-inf")},
        {"$lt": float("-inf")},
        {"$eq": float("nan")},
        {"$ne": float("nan")},
        {"$gt": float("nan")},
        {"$lt": float("nan")},
        {"$eq": float("inf")},
        {"$ne": float("-inf")},
    ],
    ids=repr,
)
def test_non_finite_filter_values_answer_as_langgraphs_store(lg: PostgresMemoryStore, namespace, condition) -> None:
    """Once a raw DataError: inf and nan have no JSON form. The answer must be InMemoryStore's."""
    reference = InMemoryStore()
    for key, price in PRICES.items():
        if isinstance(price, float | int):  # InMemoryStore's float() of a string raises: numbers only there
            reference.put(namespace, key, {"content": key, "price": price})
        lg.put(namespace, key, {"content": key, "price": price})
    numeric = {k for k, v in PRICES.items() if not isinstance(v, str)}
    expected = {item.key for item in reference.search(namespace, filter={"price": condition})}
    got = {item.key for item in lg.search(namespace, filter={"price": condition})}
    # A string price never matches an order comparison here (typed JSON comparison); $ne matches it.
    assert got & numeric == expected
    assert ("text" in got) == (next(iter(condition)) == "$ne")


def test_non_finite_values_nested_in_an_equality_filter(lg: PostgresMemoryStore, namespace) -> None:
    lg.put(namespace, "a", {"content": "a", "range": {"low": 0}})
    assert lg.search(namespace, filter={"range": {"low": float("nan")}}) == []
    assert [i.key for i in lg.search(namespace, filter={"range": {"$ne": {"low": float("inf")}}})] == ["a"]


@pytest.mark.parametrize("label", ["conv-26\n", "a\n", "\nb", "x\r", "ok\x00"])
def test_a_label_with_a_newline_or_nul_is_rejected(label: str) -> None:
    with pytest.raises(InvalidNamespace, match="not allowed"):
        to_namespace(("locomo", label))


def test_a_memory_key_ending_in_newline_is_rejected(store: MemoryStore) -> None:
    with pytest.raises(InvalidMemory, match="memory key"):
        store.create("Caroline moved from Sweden", key="f0001\n")
    assert store.count() == 0 and store.events() == []


def test_invalid_namespace_is_langgraphs_error_and_get_returns_an_item(lg: PostgresMemoryStore, namespace) -> None:
    with pytest.raises(InvalidNamespaceError):
        lg.put(("bad label",), "k", {"content": "x"})
    assert issubclass(InvalidNamespace, InvalidNamespaceError) and issubclass(InvalidNamespace, ValueError)
    lg.put(namespace, "k", {"content": "hello"})
    item = lg.get(namespace, "k")
    assert type(item) is Item, "get() returns an Item, as InMemoryStore does; search() returns SearchItems"
    assert all(type(hit) is SearchItem for hit in lg.search(namespace, query="hello"))


@pytest.mark.parametrize(
    "value, message",
    [
        ({"content": "x", "price": float("nan")}, "cannot be stored as JSON"),
        ({"content": "x", "price": float("inf")}, "cannot be stored as JSON"),
        ({"content": "a\x00b"}, "NUL"),
        ({"content": "x", "tags": ["ok", "b\x00d"]}, "NUL"),
        ({"content": "x", "when": object()}, "cannot be stored as JSON"),
    ],
)
def test_values_postgresql_cannot_store_are_clear_errors_and_write_nothing(
    lg: PostgresMemoryStore, store: MemoryStore, namespace, value, message
) -> None:
    with pytest.raises(InvalidMemory, match=message):
        lg.put(namespace, "k", value)
    assert store.count() == 0 and store.events() == []


def test_nul_in_memory_store_content_or_metadata_is_a_clear_error(store: MemoryStore) -> None:
    with pytest.raises(InvalidMemory, match="NUL"):
        store.create("Caroline\x00moved")
    with pytest.raises(InvalidMemory, match="NUL"):
        store.create_many([NewMemory("fine", metadata={"speaker": "Mel\x00"})])
    memory = store.create("Caroline moved from Sweden")
    with pytest.raises(InvalidMemory, match="NUL"):
        store.update(memory.key, content="bad\x00")
    assert store.get(memory.key).content == "Caroline moved from Sweden"
    assert [e.op for e in store.events()] == ["create"]
