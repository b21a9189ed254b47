"""Compact a whole bank: one blind episode per neighbourhood of related memories, all into one fork.

    from memupdate.agent.compaction import compact, compact_bank
    done = compact(policy, bank, fork_namespace, questions)   # the one compaction `memupdate compact`,
    done.review, done.qa.summary(), done.fork                  # the watcher and the learning run call
    result = compact_bank(policy, bank, fork_namespace, on_episode=bar_advance)   # the episodes alone
    result.fork                 # the fork holding every episode's edits (the bank is never written)
    result.calls                # each tool call: episode, name, arguments, result, ok, reason
    result.neighbourhoods       # the memory keys each episode saw

A bank of any size is cut into neighbourhoods of at most `size` memories that lie close together in
embedding space (`neighbourhoods`): near-duplicates (cosine >= 0.85) and mutual nearest neighbours
(an update's two statements) always share an episode, and
each episode is a seed and the memories nearest to it. Each episode runs the policy in blind mode (no target question) within the agent's budgets
on a scratch namespace holding only its neighbourhood, so a search or a sample sees the memories it
is meant to edit; its edits and event rows are then folded into the fork in one transaction
(`MemoryStore.fold`) and the scratch namespace is dropped.

`compact` is `compact_bank` followed by what every caller needs of it: the review of every change
(`bank.review.build_review`) and the QA proxy before -> after on the bank's questions
(`scoring.qa_change`), with a reader's F1 beside it when one is given. Proposing, applying and
rewarding stay with the caller.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage

from memupdate.agent.graph import EpisodeResult, run_episode
from memupdate.agent.policies import JudgingPolicy
from memupdate.agent.policies.batched import iter_together
from memupdate.agent.tools import MEMORY_TOOLS
from memupdate.bank.review import build_review
from memupdate.bank.review_records import Review
from memupdate.judge.judges import make_judge
from memupdate.scoring.qa_change import QAChange, qa_change
from memupdate.store import MemoryStore

DEFAULT_NEIGHBOURHOOD = 20
# Above this many memories the greedy pass (quadratic) runs inside k-means cells of about this size.
CELL_SIZE = 1500
# Memories this alike (cosine) are kept in one episode: near-duplicates must meet to be merged.
TIGHT = 0.85
# Mutual nearest neighbours at least this alike are kept in one episode too (see `_close`).
MUTUAL_FLOOR = 0.5
# Rounds of episodes over the live ends of chains the neighbourhoods cut (each round leaves fewer).
CHAIN_ROUNDS = 4


@dataclass
class CompactionResult:
    fork: MemoryStore
    neighbourhoods: list[list[str]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    messages: list[list[Any]] = field(default_factory=list)  # each finished episode's transcript
    episodes: int = 0
    failed_episodes: list[str] = field(default_factory=list)
    stop_reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class Compaction:
    """A compacted bank, not yet proposed: the fork and its episodes, the review of every change (None
    when not asked for), and the QA proxy before -> after (None without questions)."""

    result: CompactionResult
    review: Review | None
    qa: QAChange | None
    seconds: float

    @property
    def fork(self) -> MemoryStore:
        return self.result.fork


class BankMoved(Exception):
    """The bank was written while the compaction ran."""


def neighbourhoods(
    keys: Sequence[str], vectors: np.ndarray, size: int = DEFAULT_NEIGHBOURHOOD, *, seed: int = 0,
    together: Sequence[tuple[str, str]] = (),
) -> list[list[str]]:
    """Disjoint groups of at most `size` keys covering all of `keys`, each a seed memory and its nearest
    unassigned neighbours by cosine similarity (seeds taken in bank order). Large banks are first cut
    into k-means cells of about CELL_SIZE memories, so the work stays near-linear. `together`: pairs of
    keys that must share a group (the pairs a policy's judge reads as one fact: see `pairs_to_meet`),
    kept whole through the cells and the packing unless their chain alone exceeds `size`."""
    if len(keys) == 0:
        return []
    matrix = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    index = {k: i for i, k in enumerate(keys)}
    chain = _chains(len(keys), [(index[a], index[b]) for a, b in together if a in index and b in index])
    groups: list[list[str]] = []
    for cell in _cells(matrix, np.arange(len(keys)), np.random.default_rng(seed), chain):
        groups += [[keys[i] for i in group] for group in _greedy(matrix, cell, size, chain)]
    return groups


def _chains(n: int, pairs: Sequence[tuple[int, int]]) -> np.ndarray:
    """Each index's chain (the least index of its connected component over `pairs`)."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in pairs:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(i) for i in range(n)])


def _cells(matrix: np.ndarray, members: np.ndarray, rng: np.random.Generator, chain: np.ndarray) -> list[np.ndarray]:
    if len(members) <= CELL_SIZE:
        return [members]
    k = math.ceil(len(members) / CELL_SIZE)
    points = matrix[members]
    centres = points[rng.choice(len(members), k, replace=False)]
    for _ in range(8):
        labels = np.argmax(points @ centres.T, axis=1)
        for c in range(k):
            chosen = points[labels == c]
            if len(chosen):
                centre = chosen.mean(axis=0)
                centres[c] = centre / max(np.linalg.norm(centre), 1e-12)
    first = {}  # a chain goes to the cell of its first member
    for position, member in enumerate(members):
        labels[position] = first.setdefault(chain[member], labels[position])
    cells = [members[labels == c] for c in range(k) if np.any(labels == c)]
    if len(cells) == 1:  # identical vectors: split by order instead of looping forever
        return [members[i : i + CELL_SIZE] for i in range(0, len(members), CELL_SIZE)]
    return [part for cell in cells for part in _cells(matrix, cell, rng, chain)]


def _greedy(matrix: np.ndarray, members: np.ndarray, size: int, chain: np.ndarray) -> list[list[int]]:
    """Pack `members` into groups of at most `size`: near-duplicates (cosine >= TIGHT, transitively) and
    chains stay in one unit, and each group is a seed unit (in bank order) plus the units nearest to it
    that fit. A unit over `size` is cut between chains where it can be."""
    members = np.sort(members)  # bank order
    sims = matrix[members] @ matrix[members].T
    close = _close(sims)
    links = chain[members]
    close |= links[:, None] == links[None, :]
    units = [part for u in _tight_units(close) for part in _cut(u, links, size)]
    units.sort(key=lambda u: u[0])
    centres = np.stack([matrix[members[u]].mean(axis=0) for u in units])
    free = np.ones(len(units), dtype=bool)
    groups = []
    for i, unit in enumerate(units):
        if not free[i]:
            continue
        free[i] = False
        group = list(unit)
        candidates = np.flatnonzero(free)
        for j in candidates[np.argsort(-(centres[candidates] @ centres[i]), kind="stable")]:
            if len(group) + len(units[j]) <= size:
                group += units[j]
                free[j] = False
            if len(group) >= size:
                break
        groups.append(sorted(int(members[k]) for k in group))
    return groups


def _cut(unit: list[int], links: np.ndarray, size: int) -> list[list[int]]:
    """`unit` in parts of at most `size`, whole chains packed in order (a chain over `size` is cut)."""
    if len(unit) <= size:
        return [unit]
    by_chain: dict[int, list[int]] = {}
    for i in unit:
        by_chain.setdefault(int(links[i]), []).append(i)
    parts: list[list[int]] = [[]]
    for members in by_chain.values():
        for start in range(0, len(members), size):
            piece = members[start : start + size]
            if len(parts[-1]) + len(piece) > size:
                parts.append([])
            parts[-1] += piece
    return [sorted(p) for p in parts if p]


def _close(sims: np.ndarray) -> np.ndarray:
    """Pairs that must share an episode: near-duplicates (cosine >= TIGHT), and mutual nearest neighbours
    at least MUTUAL_FLOOR alike: two statements of one fact with different values ("... ice hockey" /
    "... pesäpallo") are each other's nearest memory though often under TIGHT, and a policy can only
    resolve an update it sees whole."""
    close = sims >= TIGHT
    if len(sims) > 1:
        others = sims - 2.0 * np.eye(len(sims))
        nearest = np.argmax(others, axis=1)
        rows = np.arange(len(sims))
        mutual = (nearest[nearest] == rows) & (others[rows, nearest] >= MUTUAL_FLOOR)
        close[rows[mutual], nearest[mutual]] = True
    return close


def _tight_units(close: np.ndarray) -> list[list[int]]:
    """Connected components of the `close` relation, each sorted, in order of their first member."""
    seen = np.zeros(len(close), dtype=bool)
    units = []
    for start in range(len(close)):
        if seen[start]:
            continue
        seen[start] = True
        unit, frontier = [start], [start]
        while frontier:
            nxt = np.flatnonzero(close[frontier].any(axis=0) & ~seen)
            seen[nxt] = True
            unit += nxt.tolist()
            frontier = nxt.tolist()
        units.append(sorted(unit))
    return units


def compact_bank(
    policy: BaseChatModel,
    bank: MemoryStore,
    fork_namespace: Sequence[str],
    *,
    size: int = DEFAULT_NEIGHBOURHOOD,
    max_turns: int | None = None,
    max_operations: int | None = None,
    on_plan: Callable[[int], None] | None = None,
    on_episode: Callable[[], None] | None = None,
    check_moved: bool = True,
) -> CompactionResult:
    """Fork `bank` to `fork_namespace` and run one blind episode per neighbourhood into the fork.

    BankMoved if the bank was written meanwhile (the fork is then dropped), unless `check_moved` is
    False: a live bank's changes are then checked one by one as they apply (`bank.review_queue`). On
    any exception the fork and the scratch namespaces are dropped before it propagates."""
    version = bank.version()
    fork = bank.fork(tuple(fork_namespace))
    result = CompactionResult(fork, [])
    try:
        keys, vectors = fork.vectors()
        # A policy with a judge names the pairs it must see together (`HeuristicPolicy.pairs_to_meet`).
        judging = isinstance(policy, JudgingPolicy)
        together = policy.pairs_to_meet(fork, keys, vectors) if judging else ()
        result.neighbourhoods = neighbourhoods(keys, vectors, size, together=together)
        if on_plan is not None:
            on_plan(len(result.neighbourhoods))
        if judging:  # every episode's pairs judged in one batch, not each episode's apart
            policy.judge_ahead(fork, keys, vectors, result.neighbourhoods)
        labels = [f"n{index:05d}" for index in range(len(result.neighbourhoods))]
        _episodes(policy, fork, result.neighbourhoods, labels, result, max_turns, max_operations, on_episode)
        # A fact's chain of statements longer than a neighbourhood was cut: its parts' live ends meet again.
        for round_ in range(1, CHAIN_ROUNDS + 1) if together else ():
            groups = _chain_ends(fork, together, size)
            if not groups:
                break
            result.neighbourhoods += groups
            if on_plan is not None:
                on_plan(len(result.neighbourhoods))
            live_keys, live_vectors = fork.vectors()
            policy.judge_ahead(fork, live_keys, live_vectors, groups)
            writes = len(result.calls)
            _episodes(policy, fork, groups, [f"c{round_}-{index:05d}" for index in range(len(groups))], result,
                      max_turns, max_operations, on_episode)
            if len(result.calls) == writes:
                break
        if check_moved and bank.version() != version:
            raise BankMoved(
                f"bank {bank.path!r} was written while the compaction ran: nothing was proposed; run the compaction again"
            )
    except BaseException:
        fork.drop()
        raise
    return result


def _episodes(
    policy: BaseChatModel, fork: MemoryStore, groups: Sequence[Sequence[str]], labels: Sequence[str], result: CompactionResult,
    max_turns: int | None, max_operations: int | None, on_episode: Callable[[], None] | None,
) -> None:
    """One blind episode per group of `fork`'s keys, each folded into the fork, recorded in `result`."""
    jobs = [partial(_blind_episode, fork, group, episode, max_turns, max_operations)
            for group, episode in zip(groups, labels, strict=True)]
    # A local checkpoint's episodes run together (their turns decoded in batches); each folds into
    # the fork in bank order as it and those before it are done. Other policies run one by one.
    for episode, outcome in zip(labels, iter_together([policy] * len(jobs), jobs), strict=True):
        if not isinstance(outcome, BaseException):
            try:
                fork.fold(_scratch(fork, episode))
            except Exception as exc:
                _scratch(fork, episode).drop()
                outcome = exc
        if isinstance(outcome, BaseException):  # a failed episode (a bad reply, a timeout) loses only its edits
            result.failed_episodes.append(f"{episode}: {type(outcome).__name__}: {str(outcome).strip()[:200]}")
        else:
            result.calls += _calls(outcome.messages, episode, policy)
            result.messages.append(outcome.messages)
            reason = outcome.stop_reason or "unknown"
            result.stop_reasons[reason] = result.stop_reasons.get(reason, 0) + 1
        result.episodes += 1
        if on_episode is not None:
            on_episode()


def _chain_ends(fork: MemoryStore, together: Sequence[tuple[str, str]], size: int) -> list[list[str]]:
    """Groups for another round of episodes: the memories still live in `fork` of each chain (a connected
    component of `together`, the pairs read as one fact; a merge's result stands for its sources) that
    holds two or more of them, packed into groups of at most `size` (a chain's live ends in one where
    they fit)."""
    live = fork.list()
    stands_for = {m.key: [m.key, *(m.metadata.get("merged_from") or [])] for m in live}
    keys = sorted({k for pair in together for k in pair})
    index = {k: i for i, k in enumerate(keys)}
    chain = _chains(len(keys), [(index[a], index[b]) for a, b in together])
    members: dict[int, list[str]] = {}
    for memory in live:
        roots = {int(chain[index[k]]) for k in stands_for[memory.key] if k in index}
        if len(roots) == 1:
            members.setdefault(roots.pop(), []).append(memory.key)
    ends = [sorted(group) for group in members.values() if len(group) > 1]
    if not ends:
        return []
    flat = [k for group in ends for k in group]
    vectors = fork.vectors_of(flat)
    flat = [k for k in flat if k in vectors]
    links = [(group[i], group[i + 1]) for group in ends for i in range(len(group) - 1)]
    groups = neighbourhoods(flat, np.stack([vectors[k] for k in flat]), size, together=links) if flat else []
    return [group for group in groups if len(group) > 1]


def compact(
    policy: BaseChatModel,
    bank: MemoryStore,
    fork_namespace: Sequence[str],
    questions: Sequence[Any] = (),
    *,
    reader: Any = None,
    size: int = DEFAULT_NEIGHBOURHOOD,
    max_turns: int | None = None,
    max_operations: int | None = None,
    check_moved: bool = True,
    review: bool = True,
    on_plan: Callable[[int], None] | None = None,
    on_episode: Callable[[], None] | None = None,
    on_answer: Callable[[int, int], None] | None = None,
) -> Compaction:
    """Compact `bank` into a fork at `fork_namespace` (`compact_bank`), then score the fork on `questions`
    with the QA proxy (and `reader`'s F1, if given) and review every change (skipped with `review=False`),
    its statements read by the policy's own judge, or the default one (`make_judge`) for a policy without.
    The bank is never written; on any exception the fork is dropped."""
    started = time.perf_counter()
    result = compact_bank(policy, bank, fork_namespace, size=size, max_turns=max_turns, max_operations=max_operations,
                          on_plan=on_plan, on_episode=on_episode, check_moved=check_moved)
    try:
        qa = qa_change(bank, result.fork, questions, reader, on_answer) if questions else None
        # The review reads pairs as the policy did (remembering what it read), where it has a judge.
        judge = (policy.remembering_judge() if isinstance(policy, JudgingPolicy) else make_judge()) if review else None
        page = build_review(bank, result.fork, result.calls, qa=qa.summary() if qa else None, judge=judge) if review else None
    except BaseException:
        result.fork.drop()
        raise
    return Compaction(result, page, qa, time.perf_counter() - started)


def neighbourhood_episode(
    policy: BaseChatModel,
    fork: MemoryStore,
    keys: Sequence[str],
    episode: str,
    *,
    max_turns: int | None = None,
    max_operations: int | None = None,
) -> EpisodeResult:
    """One blind episode on the memories `keys` of `fork`: they are copied to a scratch namespace (a
    sibling of the fork), the policy edits them there, and the edits are folded into `fork`. On any
    exception the scratch is dropped and `fork` is unchanged."""
    outcome = _blind_episode(fork, keys, episode, max_turns, max_operations, policy)
    try:
        fork.fold(_scratch(fork, episode))
    except BaseException:
        _scratch(fork, episode).drop()
        raise
    return outcome


def _scratch(fork: MemoryStore, episode: str) -> MemoryStore:
    # A sibling of the fork, not a child: a bank may be up to six labels deep.
    return fork.scoped((*fork.namespace[:-1], f"{fork.namespace[-1]}-{episode}"), episode=episode)


def _blind_episode(
    fork: MemoryStore, keys: Sequence[str], episode: str, max_turns: int | None, max_operations: int | None,
    policy: BaseChatModel,
) -> EpisodeResult:
    """The episode of `neighbourhood_episode` on its scratch namespace, not yet folded into `fork`; on any
    exception the scratch is dropped."""
    scratch = _scratch(fork, episode)
    fork.fork_keys(scratch, keys)
    try:
        return run_episode(policy, scratch, None, max_turns=max_turns, max_operations=max_operations)
    except BaseException:
        scratch.drop()
        raise


def _calls(messages: Sequence[Any], episode: str, policy: BaseChatModel) -> list[dict[str, Any]]:
    """The episode's write calls that ran, in order, each with the reason the policy gave: a `reason`
    argument, else the policy's own note for the call (`reason_for`), else its text that turn."""
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    explain = getattr(policy, "reason_for", None)
    calls = []
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        said = message.content if isinstance(message.content, str) else ""
        for call in message.tool_calls:
            tool = MEMORY_TOOLS.get(call["name"])
            reply = results.get(call["id"])
            if tool is None or not tool.writes or reply is None or reply.status == "error":
                continue
            args = dict(call["args"])
            reason = args.get("reason") or (explain(call["name"], args) if explain else None) or said.strip() or None
            calls.append({"episode": episode, "tool": call["name"], "args": args, "result": str(reply.content), "reason": reason})
    return calls
