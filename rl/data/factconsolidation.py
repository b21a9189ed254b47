"""MemoryAgentBench's FactConsolidation rows: numbered facts in which a newer fact overrides an older one
it contradicts, and questions whose answers follow the newest facts.

    from memupdate.rl.data.factconsolidation import load_factconsolidation, load_context, select_sources
    sets = select_sources(load_factconsolidation("factconsolidation-dev.jsonl"), "sh_6k,mh_6k")
    sets[0].name, sets[0].context.context_id, len(sets[0].qa)   # "sh_6k", "c455-8f3a2b1c", 100
    report = load_context(store, sets[0].context)    # ("factconsolidation", "c455-8f3a2b1c"): 455 added
    sets[0].accepted[3]                               # every accepted answer of question 3 (exact match)

The file is never downloaded: the user passes it (the benchmark's own row shape, one JSON object a
line: `source`, `n_facts`, `context`, `questions`, `answers`). Nothing is assumed about which
sub-datasets it holds: a source named `..._sh_<size>` is single-hop, `..._mh_<size>` multi-hop, and
rows with the same context (sh and mh of one size) share one `FactContext`, loaded into one bank.

Each fact becomes one memory, keyed `s000042` by its serial and written in serial order, with
`metadata["serial"]` and `metadata["time"]`, an ISO time to the second one hour after the previous
fact's: serial order is time order, so a newer fact (larger serial) shows a later time. Embeddings are
computed once, at loading, in one batched call (`MemoryStore.create_many`); loading again adds nothing.
A question's `answer` is its first accepted answer (what the QA proxy looks for); the benchmark's rule
(`scoring.metrics.substring_exact_match`) accepts any of `accepted[index]`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from memupdate.errors import MemupdateError
from memupdate.scoring.categories import MULTI_HOP, SINGLE_HOP
from memupdate.scoring.questions import QAItem
from memupdate.store import MemoryStore, NewMemory

DATASET = "factconsolidation"
# The first fact's time; each later serial is one hour on. Any fixed start works: only the order matters.
FIRST_FACT_TIME = datetime(2000, 1, 1)
FACT_INTERVAL = timedelta(hours=1)
HOP_CATEGORIES = {"sh": SINGLE_HOP, "mh": MULTI_HOP}

_HEADER = "Here is a list of facts:"
_FACT_LINE = re.compile(r"(\d+)\. (.*)")
_SOURCE_NAME = re.compile(r"(?:factconsolidation_)?((sh|mh)_\w+)")
_FIX = "pass MemoryAgentBench's FactConsolidation rows as JSONL (one {source, n_facts, context, questions, answers} a line)"


@dataclass(frozen=True)
class FactContext:
    """One list of facts, `facts[serial]` its text; `context_id` names its bank (facts count and digest)."""

    context_id: str
    facts: tuple[str, ...]


@dataclass(frozen=True)
class FactConsolidationSet:
    """One sub-dataset (a row of the file): its context and its questions with every accepted answer."""

    source: str  # as the file names it: "factconsolidation_sh_6k"
    name: str  # "sh_6k"
    context: FactContext
    qa: tuple[QAItem, ...]
    accepted: tuple[tuple[str, ...], ...]  # accepted answers of qa[i], for the exact-match rule

    @property
    def sample_id(self) -> str:  # `HasQuestions`: the id reports name it by
        return self.name


@dataclass(frozen=True)
class LoadReport:
    base: MemoryStore
    added: int
    present: int

    def summary(self) -> str:
        return f"{self.base.path}: {self.added} facts added, {self.present} already present"


def fact_key(serial: int) -> str:
    return f"s{serial:06d}"


def fact_time(serial: int) -> str:
    """The statement time of fact `serial`, ISO to the second: larger serial, later time."""
    return (FIRST_FACT_TIME + serial * FACT_INTERVAL).isoformat(timespec="seconds")


def context_namespace(context: FactContext) -> tuple[str, str]:
    return (DATASET, context.context_id)


def parse_facts(context: str, where: str = "context") -> tuple[str, ...]:
    """The facts of a context `"Here is a list of facts:\\n0. <fact>\\n1. <fact>..."`, index = serial.
    MemupdateError naming `where` and the line when serials are not 0, 1, 2, ... in order."""
    lines = [line for line in context.strip().splitlines() if line.strip()]
    if lines and lines[0].strip() == _HEADER:
        lines = lines[1:]
    facts = []
    for number, line in enumerate(lines):
        match = _FACT_LINE.fullmatch(line.strip())
        if match is None or int(match.group(1)) != number:
            raise MemupdateError(f"{where}: fact line {number + 1} {line[:60]!r} is not '{number}. <fact>'; {_FIX}")
        facts.append(match.group(2).strip())
    if not facts:
        raise MemupdateError(f"{where}: no numbered facts; {_FIX}")
    return tuple(facts)


def load_factconsolidation(path: str | Path) -> list[FactConsolidationSet]:
    """Every row of the file, in file order; rows with the same context share one `FactContext`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MemupdateError(f"FactConsolidation file {str(path)!r}: {exc.strerror}; {_FIX}") from None
    contexts: dict[str, FactContext] = {}
    sets = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            sets.append(_row(json_row(line, path, number), f"{path}:{number}", contexts))
    if not sets:
        raise MemupdateError(f"FactConsolidation file {str(path)!r} holds no rows; {_FIX}")
    return sets


def json_row(line: str, path: Path, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise MemupdateError(f"FactConsolidation file {str(path)!r} line {number} is not JSON ({exc.msg}); {_FIX}") from None
    if not isinstance(row, dict) or not all(k in row for k in ("source", "context", "questions", "answers")):
        raise MemupdateError(f"FactConsolidation file {str(path)!r} line {number} lacks source/context/questions/answers; {_FIX}")
    return row


def _row(row: dict, where: str, contexts: dict[str, FactContext]) -> FactConsolidationSet:
    source = str(row["source"])
    named = _SOURCE_NAME.fullmatch(source)
    if named is None:
        raise MemupdateError(f"{where}: source {source!r} is not factconsolidation_sh_<size> or _mh_<size>; {_FIX}")
    digest = hashlib.sha256(row["context"].encode()).hexdigest()
    if digest not in contexts:
        facts = parse_facts(row["context"], where)
        if row.get("n_facts") is not None and int(row["n_facts"]) != len(facts):
            raise MemupdateError(f"{where}: n_facts is {row['n_facts']} but the context numbers {len(facts)} facts; {_FIX}")
        contexts[digest] = FactContext(f"c{len(facts)}-{digest[:8]}", facts)
    questions, answers = row["questions"], row["answers"]
    if len(questions) != len(answers):
        raise MemupdateError(f"{where}: {len(questions)} questions but {len(answers)} answer lists; {_FIX}")
    accepted = tuple(_accepted(answer, where, i) for i, answer in enumerate(answers))
    category = HOP_CATEGORIES[named.group(2)]
    qa = tuple(QAItem(i, str(q), ok[0], None, (), category) for i, (q, ok) in enumerate(zip(questions, accepted, strict=True)))
    return FactConsolidationSet(source, named.group(1), contexts[digest], qa, accepted)


def _accepted(answer: object, where: str, index: int) -> tuple[str, ...]:
    """A question's accepted answers: a string, a list of them, or a list of lists (flattened)."""
    items = answer if isinstance(answer, list) else [answer]
    flat = [str(a) for item in items for a in (item if isinstance(item, list) else [item]) if str(a).strip()]
    if not flat:
        raise MemupdateError(f"{where}: question {index} has no accepted answer; {_FIX}")
    return tuple(flat)


def select_sources(sets: list[FactConsolidationSet], names: str | None) -> list[FactConsolidationSet]:
    """The sets named in `names` (comma-separated, `sh_6k` or `factconsolidation_sh_6k`); all when None."""
    if not names:
        return sets
    by_name = {s.name: s for s in sets} | {s.source: s for s in sets}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise MemupdateError(f"--sources {','.join(missing)}: not in the file; it holds {', '.join(s.name for s in sets)}")
    return [by_name[n] for n in dict.fromkeys(wanted)]


def fact_memories(context: FactContext) -> list[NewMemory]:
    """The memories of a context, in serial order (see the module docstring)."""
    return [
        NewMemory(text, kind="semantic", key=fact_key(serial), metadata={
            "serial": serial, "time": fact_time(serial), "source": f"{DATASET}:{context.context_id}"})
        for serial, text in enumerate(context.facts)
    ]


@dataclass(frozen=True)
class FactBank:
    """A bank of one context's facts with the questions scored on it, as learning trains and evaluates
    on them (the shape of a LoCoMo `Conversation` that a task reads: `sample_id`, `qa`, `load`).
    `without`: facts left out (a training bank leaves out those of the contexts nested in it)."""

    sample_id: str
    context: FactContext
    qa: tuple[QAItem, ...]
    without: frozenset[str] = frozenset()

    def load(self, store: MemoryStore) -> MemoryStore:
        """The bank, written once (keys and times by the facts' serials in `context`); safe to repeat."""
        base = store.scoped((DATASET, self.sample_id))
        present = set(base.snapshot())
        new = [m for m in fact_memories(self.context) if m.content not in self.without and m.key not in present]
        if new:
            base.create_many(new, skip_existing=True)
        return base


def fact_banks(sets: list[FactConsolidationSet]) -> tuple[list[FactBank], list[FactBank]]:
    """(training banks, evaluation banks). A context nested in a larger one (all its facts among the
    larger one's, as the 6k context is in the 32k) is an evaluation bank, asked every question of its
    sub-datasets (single-hop and multi-hop, numbered in file order); each larger context gives a training
    bank of its facts that no nested context holds (`<context id>-train`), asked its own questions except
    those an evaluation bank also asks."""
    contexts = {s.context.context_id: s.context for s in sets}
    nested = {inner: outer for inner, small in contexts.items() for outer, large in contexts.items()
              if inner != outer and set(small.facts) <= set(large.facts)}

    def asked(context_id: str, exclude: set[str] = frozenset()) -> tuple[QAItem, ...]:
        own = [q for s in sets if s.context.context_id == context_id for q in s.qa if q.question not in exclude and q.answer]
        return tuple(replace(q, index=i) for i, q in enumerate(own))

    held_out = [FactBank(context_id, contexts[context_id], asked(context_id)) for context_id in nested]
    training = []
    for context_id, context in contexts.items():
        if context_id in nested:
            continue
        inner = [c for c, outer in nested.items() if outer == context_id]
        exclude = {q.question for s in sets if s.context.context_id in inner for q in s.qa}
        without = frozenset(fact for c in inner for fact in contexts[c].facts)
        training.append(FactBank(f"{context_id}-train", context, asked(context_id, exclude), without))
    return training, held_out


def load_context(store: MemoryStore, context: FactContext) -> LoadReport:
    """Write the context's facts its bank lacks (one batched embedding call); safe to repeat."""
    base = store.scoped(context_namespace(context))
    present = set(base.snapshot())
    new = [memory for memory in fact_memories(context) if memory.key not in present]
    created = base.create_many(new, skip_existing=True) if new else []
    return LoadReport(base, len(created), len(context.facts) - len(created))


__all__ = [
    "DATASET",
    "FactBank",
    "FactConsolidationSet",
    "FactContext",
    "LoadReport",
    "context_namespace",
    "fact_banks",
    "fact_key",
    "fact_memories",
    "fact_time",
    "load_context",
    "load_factconsolidation",
    "parse_facts",
    "select_sources",
]
