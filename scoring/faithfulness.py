"""Faithfulness: every word the agent writes into memory must come from the conversation.

    from memupdate.scoring.faithfulness import faithfulness_of_writes
    result = faithfulness_of_writes(base, base.snapshot(), changes_from(fork, base).written)
    result.unsupported_tokens, result.examples

A *write* is a memory of the fork that the base does not hold with the same text (created, updated,
merged or split). Its *sources* are what it draws on:
- an update: the memory it rewrites;
- a merge or split: the base memories named in `merged_from` / `split_from`;
- a create: the `NEAREST_SOURCES` base memories closest to its text (the facts it restates).
A written token is *supported* when a source holds it: in its text, in its dialogue turns (the
`turns` LoCoMo ingestion stores in provenance), or in a date derived from its session date (the
date itself and the dates relative expressions in its text resolve to, as `text/dates.py` anchors
them). Stop words are free, negations excepted. Tokens are LoCoMo's normalised, stemmed tokens, the proxy's own.

What this closes: lists of dates, months or numbers, question text, "not mentioned" and other words
no source holds cost reward however retrieval ranks them (`scoring/reward.py` charges per token).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cache

from memupdate.scoring.metrics import normalized_tokens
from memupdate.store import MemoryRecord, MemoryStore
from memupdate.text.dates import anchor_relative_dates
from memupdate.text.strategies import STOPWORDS

NEAREST_SOURCES = 3
# Stop words cost nothing, except negations: "no" and "not" answer yes/no questions and turn facts around.
NEGATIONS = frozenset({"no", "not", "nor"})
_ORDINAL = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


@dataclass(frozen=True)
class Faithfulness:
    writes: int
    written_tokens: int  # content tokens written (stop words excluded)
    unsupported_tokens: int
    examples: tuple[str, ...]  # up to 12 unsupported tokens, for logs


@cache
def free_tokens() -> frozenset[str]:
    """The stems of the stop words but negations (stemmed on first use: nltk loads with the first stem)."""
    return frozenset(token for word in STOPWORDS - NEGATIONS for token in normalized_tokens(word))


def date_tokens(day: date) -> set[str]:
    """A day as LoCoMo writes dates ("7 May 2023"), with its weekday, short month and ordinal."""
    ordinal = f"{day.day}{_ORDINAL.get(day.day, 'th')}"
    return set(normalized_tokens(f"{day.day} {ordinal} {day:%B} {day:%b} {day.year} {day:%A}"))


def source_support(source: MemoryRecord) -> set[str]:
    """Every token a write may take from `source` (see the module docstring)."""
    texts = [source.content, str(source.metadata.get("session_date") or "")]
    texts += [str(turn) for turn in (source.metadata.get("turns") or {}).values()]
    support: set[str] = set()
    days = [_day(d) for d in source.metadata.get("dates") or [source.metadata.get("date")]]
    for day in filter(None, days):
        support |= date_tokens(day)
        texts += [anchor_relative_dates(text, day) for text in texts[:1]]
    for text in texts:
        support.update(normalized_tokens(text))
    return support


def sources_of(
    memory: MemoryRecord,
    before: Mapping[str, MemoryRecord],
    base: MemoryStore,
    nearest_keys: Mapping[str, Sequence[str]] | None = None,
) -> list[MemoryRecord]:
    """The memories `memory` draws on (see the module docstring). `nearest_keys`: the base keys nearest
    each new key, found in SQL with the fork's diff (`changes_from(..., nearest=NEAREST_SOURCES)`), which
    saves the search when given."""
    named = [memory.key, *memory.metadata.get("merged_from", []), memory.metadata.get("split_from")]
    found = [before[key] for key in named if key in before]
    if found:
        return found
    nearest = (nearest_keys or {}).get(memory.key)
    if nearest is not None and all(key in before for key in nearest):
        return [before[key] for key in nearest]
    return [hit.memory for hit in base.search(memory.content, NEAREST_SOURCES)]


def faithfulness_of_writes(
    base: MemoryStore,
    before: Mapping[str, MemoryRecord],
    writes: Sequence[MemoryRecord],
    nearest_keys: Mapping[str, Sequence[str]] | None = None,
    supports: MutableMapping[str, frozenset[str]] | None = None,
) -> Faithfulness:
    """Count the tokens the `writes` (the fork's memories whose text the base does not hold under the same
    key) hold that none of their sources supports; `before` is the base's snapshot; `nearest_keys`: see
    `sources_of`. `supports`: each memory of `before`'s `source_support` by key, filled here, for a caller
    that keeps it as long as `before` (the reward, while the base's version holds)."""
    written = unsupported = 0
    examples: list[str] = []
    for memory in writes:
        sources = sources_of(memory, before, base, nearest_keys)
        support = set().union(*(_support(source, before, supports) for source in sources))
        for token in _content_tokens(memory.content):
            written += 1
            if token not in support:
                unsupported += 1
                if len(examples) < 12:
                    examples.append(token)
    return Faithfulness(len(writes), written, unsupported, tuple(examples))


def _support(source: MemoryRecord, before: Mapping[str, MemoryRecord], supports: MutableMapping | None) -> frozenset[str]:
    """`source_support(source)`, from `supports` when `source` is a memory of `before`."""
    if supports is None or before.get(source.key) is not source:
        return frozenset(source_support(source))
    support = supports.get(source.key)
    if support is None:
        support = supports[source.key] = frozenset(source_support(source))
    return support


def _content_tokens(text: str) -> Iterable[str]:
    return (token for token in normalized_tokens(text) if token not in free_tokens())


def _day(value: object) -> date | None:
    try:
        return date.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
