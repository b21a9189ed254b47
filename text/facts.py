"""When two alike memories state one fact, and which was said later: the text mechanics of facts that change.

    from memupdate.text.facts import relation, stated_at
    relation("Alice is vegetarian", "Alice is no longer vegetarian")        # "update"
    relation("The CEO of Apple Inc. is Tim Cook.", "The CEO of Apple Inc. is Steve Jobs.")   # "update"
    relation("Mel ran a 10k race", "Mel ran a 10k race in Berlin")           # "duplicate"
    relation("Mel went camping", "Mel painted a sunset")                    # "compatible"
    shared_head("The CEO of Apple Inc. is Tim Cook.", "The CEO of Apple Inc. is Steve Jobs.")  # "The CEO of Apple Inc. is"
    stated_at(memory)       # "2026-11-25T14:03:10" (the app's write time, an imported time) or the day

Two alike statements are a *duplicate* (one fact told twice: the words of one are all in the other, and
neither says the state changed), an *update* (the same subject and attribute with another value or
state: the same words up to a short differing end that shares no word, after a beginning that names
something, "The CEO of X is A" / "... is B" but not "I am a librarian" / "I am a woman" (not for events:
another detail of an event is another event); or the same
words but for words that say a state changed, "no longer", "stopped", "again", "finished"), or
*compatible* (both can be true). `relation` is the rule's reading, used by the heuristic policy (newest
wins) and by the review (which change is a clear update); the tools never call it: which memory is
stale is the policy's decision.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from memupdate.text.strategies import content_words

if TYPE_CHECKING:
    from memupdate.store import MemoryRecord

Relation = Literal["duplicate", "update", "compatible"]

# Words that say a state began, ended or changed: a statement holding one that its twin lacks is a new state.
CHANGE_WORDS = frozenset(
    """no not never longer anymore again now stopped quit finished started began left moved changed became
    former formerly used gave retired divorced ended resumed""".split()
)
# "The CEO of X is A" / "The CEO of X is B": the differing ends are at most this many tokens...
MAX_DIFFERING_TAIL = 6
# ...after a shared beginning of at least this many tokens and this share of the longer statement.
MIN_SHARED_HEAD = 3
MIN_SHARED_SHARE = 0.6
SAME_BATCH_SECONDS = 60  # statements written this close together are one batch: neither is stated later
_TOKEN = re.compile(r"[\w'’-]+")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens of `text`, in order (stopwords kept: "no longer" matters here)."""
    return [t.strip("'’-") for t in _TOKEN.findall(text.lower()) if t.strip("'’-")]


def relation(older: str, newer: str, *, events: bool = False) -> Relation:
    """How two alike statements relate (see the module docstring); the argument order does not matter.
    `events`: both tell events (episodic memories), where another detail is another event, not a new
    value: only words that say a state changed make an update."""
    a, b = tokens(older), tokens(newer)
    if a == b:
        return "duplicate"
    changed = (set(a) ^ set(b)) & CHANGE_WORDS
    if changed and len(set(a) ^ set(b) - CHANGE_WORDS) <= 2:
        return "update"  # the same words but for a change of state ("is vegetarian" / "is no longer vegetarian")
    head = len(os.path.commonprefix([a, b]))  # tokens the two statements begin with
    tail_a, tail_b = a[head:], b[head:]
    if (
        not events and head >= MIN_SHARED_HEAD and head >= MIN_SHARED_SHARE * max(len(a), len(b))
        and content_words(" ".join(a[:head]))  # the head names the subject or attribute: not "I am a" / "I have a"
        and tail_a and tail_b and max(len(tail_a), len(tail_b)) <= MAX_DIFFERING_TAIL
        and not set(tail_a) & set(tail_b)  # "... in Soviet Union is A" / "... in United Kingdom is B": two subjects
        and not content_words(" ".join(tail_a)) <= content_words(" ".join(tail_b))
        and not content_words(" ".join(tail_b)) <= content_words(" ".join(tail_a))
    ):
        return "update"  # one subject and attribute, another value at the end
    words_a, words_b = content_words(older), content_words(newer)
    if not changed and words_a and words_b and (words_a <= words_b or words_b <= words_a):
        return "duplicate"
    return "compatible"


def shared_head(older: str, newer: str) -> str:
    """The words two statements begin with, as the newer writes them ("The author of 1984 is"): what a
    supersession's `reason` names first, so a reader (and a student) sees which fact changed."""
    a, b = older.split(), newer.split()
    head = len(os.path.commonprefix([[w.lower() for w in a], [w.lower() for w in b]]))
    return " ".join(b[:head])


def stated_at(memory: MemoryRecord) -> str | None:
    """When the memory's statement was made, as a sortable ISO string: its `time` (a loader's, to the
    second), else the app's last write of an imported item, else its day; None when nothing says."""
    meta = memory.metadata
    origin = meta.get("imported_from") or {}
    value = meta.get("time") or origin.get("updated_at") or origin.get("created_at") or meta.get("date")
    return str(value).replace(" ", "T") if value else None


def shown_time(memory: MemoryRecord) -> str | None:
    """The statement time a look shows: to the second where it is known (`2026-11-25 14:03:10`), else the
    day; None for a memory with neither (a merge of several days shows their range instead)."""
    value = stated_at(memory)
    if value is None:
        return None
    return value[:19].replace("T", " ") if "T" in value else value


def is_newer(a: MemoryRecord, b: MemoryRecord) -> bool | None:
    """Whether `a` was stated after `b`; None when either time is unknown or they are not ordered
    (`stated_later`)."""
    return stated_later(stated_at(a), stated_at(b))


def stated_later(ta: str | None, tb: str | None) -> bool | None:
    """Whether time `ta` is later than `tb` (ISO strings); None when either is unknown, they fall on one
    day where one of them is only a day, or they lie within SAME_BATCH_SECONDS of each other: one batch
    of an app's writes is not ordered by milliseconds, so neither of its statements is stated later."""
    if ta is None or tb is None:
        return None
    if min(len(ta), len(tb)) <= 10:
        a, b = ta[:10], tb[:10]
        return None if a == b else a > b
    try:
        gap = (_instant(ta) - _instant(tb)).total_seconds()
    except (TypeError, ValueError):  # not ISO, or one with a zone and one without: the text orders them
        return None if ta == tb else ta > tb
    return None if abs(gap) < SAME_BATCH_SECONDS else gap > 0


def _instant(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
