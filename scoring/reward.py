"""The reward: did the edits make the memory answer questions better, truthfully, and at what cost?

    reward = combine(performance_delta, memory_efficiency) − unsupported_penalty
    combine(d, e) = d × e            when d ≥ 0
                  = d × (2 − e)      when d < 0   (inefficiency never softens harm)

- performance_delta: QA proxy (`scoring/qa_proxy.py`) on the edited fork minus on the untouched base. The
  proxy credits an answer only in a memory about the question and less under a rival value ranked
  above it, so a date sprayed into unrelated memories earns nothing and superseding a stale value pays.
  `questions[0]` is the target question; `questions[1:]` are other questions of the same conversation
  (collateral): delta = target_weight × target delta + (1 − target_weight) × mean collateral delta.
  Deleting or merging away what other questions need is negative, not zero.
- memory_efficiency = size × density × change, each in (0, 1]:
  - size    = 1 / (1 + size_penalty × growth), growth = max(0, after − before) / before memories;
  - density = 1 / (1 + density_penalty × share of the *written* memories longer than
              `max_memory_tokens`): one giant memory is charged however big the bank is;
  - change  = 1 / (1 + change_penalty × max(0, edited − free_edits) / before).
- unsupported_penalty = min(max_unsupported_penalty, unsupported_token_cost × tokens written that no
  source supports) (`scoring/faithfulness.py`): invented dates, copied questions and "not mentioned" cost.
A no-op scores exactly 0: the fork holds the same rows and embeddings as the base, search breaks ties
by key, and nothing was written. The base is never written by an episode.

    from memupdate.scoring.reward import compute_reward
    breakdown = compute_reward(base_store, fork_store, [target, *collateral])
    breakdown.reward, breakdown.performance_delta, breakdown.efficiency.value, breakdown.as_dict()
    breakdown.fork_scores[0].context            # what the target question read on the fork

A compaction episode (one neighbourhood of a bank, blind: `compute_compaction_reward`) is scored by the
same formula on every question of the bank, with three differences:
- performance_delta = Σ over every question of (fork − base) / reach, where reach counts the questions
  the neighbourhood can affect: those whose base context holds one of its memories, or whose evidence
  is in its provenance (at least 1). A question no edit reaches changes by exactly 0; one it reaches by
  accident (a new memory crowding its context) still counts in full. Weighted by reach / questions, the
  deltas of a bank's disjoint neighbourhoods add up to the whole bank's QA change.
- efficiency is measured against the neighbourhood (its size is `before`), and lost information is
  charged: coverage_penalty = coverage_cost × sources whose words no result keeps (the review's coverage
  flags, `bank/review.py`).
- each call the episode made that did not run (a tool refused it, or it could not be parsed) costs
  failed_call_cost: a refused call changes nothing, so without it a policy that repeats a refused call
  until its turns run out scores the same as one that stops, and spraying updates over every memory
  scores the same as choosing the ones the tools can date.

`compute_reward` is the entry point of a targeted episode, `compute_compaction_reward` of a compaction. It reads what the fork changed in SQL (`store/fork_diff.py`),
merges that into the base's hits, and keeps the base's hits, scores and snapshot while the base's
version holds (`base_cache.py`). `reward_spec.py` computes the same reward the plain way (a search per
question, two snapshots compared in Python): the specification the tests and `bench/reward.py` hold
this path to, to 1e-9.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from memupdate.scoring.base_cache import base_cache
from memupdate.scoring.faithfulness import Faithfulness, faithfulness_of_writes
from memupdate.scoring.metrics import normalized_tokens
from memupdate.scoring.qa_proxy import (
    DEFAULT_CANDIDATES,
    DEFAULT_CONTEXT_TOKENS,
    QAScore,
    Question,
    score_fork,
    score_questions,
)
from memupdate.scoring.questions import COLLATERAL_QUESTIONS, qa_from_row
from memupdate.scoring.summaries import mean
from memupdate.store import MemoryRecord, MemoryStore, NamespaceChanges


@dataclass(frozen=True)
class RewardConfig:
    """Every knob of the reward, with its default; `configs/`, verl's reward kwargs and the CLI pass
    these through (`RewardConfig.from_kwargs`)."""

    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    candidates: int = DEFAULT_CANDIDATES
    # Targeted episodes also score this many other questions of the conversation (collateral damage).
    collateral_questions: int = COLLATERAL_QUESTIONS
    target_weight: float = 0.5
    size_penalty: float = 1.0
    density_penalty: float = 1.0
    max_memory_tokens: int = 60
    change_penalty: float = 1.0
    free_edits: int = 10
    unsupported_token_cost: float = 0.02
    max_unsupported_penalty: float = 1.0
    # Compaction episodes: each bank memory whose words no result of its change keeps (a coverage flag).
    coverage_cost: float = 0.05
    # Compaction episodes: each tool call that did not run (refused by a tool, or not parsed).
    failed_call_cost: float = 0.01
    # "proxy" (no LLM) or "answerer": a frozen LLM answers from the same context and LoCoMo's F1 of its
    # answer is the QA score (Memory-R1's reward); answers are cached in PostgreSQL.
    qa: str = "proxy"
    answerer_model: str | None = None
    answerer_base_url: str | None = None
    answerer_api_key: str | None = None

    def __post_init__(self) -> None:
        if self.qa not in ("proxy", "answerer"):
            raise ValueError(f"reward qa={self.qa!r}: choose proxy or answerer")
        if self.qa == "answerer" and not self.answerer_model:
            raise ValueError("reward qa=answerer needs answerer_model (and answerer_base_url for a local server)")

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> RewardConfig:
        """A config from loose keyword arguments (verl's `reward_kwargs`), naming unknown keys."""
        defaults = {f.name: getattr(cls(), f.name) for f in fields(cls)}
        unknown = sorted(set(kwargs) - set(defaults))
        if unknown:
            raise ValueError(f"unknown reward option(s) {', '.join(unknown)}; the options are {', '.join(defaults)}")
        return cls(**{k: v if defaults[k] is None or v is None else type(defaults[k])(v) for k, v in kwargs.items()})

    @property
    def scoring_key(self) -> tuple:
        """The fields a question's QA score depends on (the rest weigh or charge scores)."""
        return (self.context_tokens, self.candidates, self.qa, self.answerer_model, self.answerer_base_url)


@dataclass(frozen=True)
class Efficiency:
    """memory_efficiency and its factors for one edited fork (see the module docstring)."""

    value: float
    size: float
    density: float
    change: float
    memories_before: int
    memories_after: int
    edited: int


@dataclass(frozen=True)
class RewardBreakdown:
    reward: float
    performance_delta: float
    target_delta: float
    collateral_delta: float | None  # None when only the target was scored
    qa_before: float  # the target's QA proxy on the base and on the fork
    qa_after: float
    context_tokens_before: int
    context_tokens_after: int
    efficiency: Efficiency
    faithfulness: Faithfulness
    unsupported_penalty: float
    # Every scored question's QAScore on each side, in the order given (left out of `as_dict`: they hold text).
    base_scores: tuple[QAScore, ...] = field(default=(), repr=False)
    fork_scores: tuple[QAScore, ...] = field(default=(), repr=False)
    reach: int | None = None  # compaction: the questions the neighbourhood can affect (None: targeted)
    lost_sources: int = 0  # compaction: bank memories whose words no result keeps
    coverage_penalty: float = 0.0
    failed_calls: int = 0  # compaction: the episode's calls that did not run
    failed_call_penalty: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The numbers (and faithfulness's examples), flat enough for logs and verl's extra info."""
        values = asdict(replace(self, base_scores=(), fork_scores=()))
        del values["base_scores"], values["fork_scores"]
        return values


def size_factor(before: int, after: int, penalty: float) -> float:
    growth = max(0, after - before) / max(before, 1)
    return 1.0 / (1.0 + penalty * growth)


def density_factor(token_counts: Sequence[int], max_tokens: int, penalty: float) -> float:
    """Charge the share of written memories over `max_tokens` tokens (1.0 when nothing was written)."""
    if not token_counts:
        return 1.0
    long_share = sum(count > max_tokens for count in token_counts) / len(token_counts)
    return 1.0 / (1.0 + penalty * long_share)


def change_factor(edited: int, before: int, free_edits: int, penalty: float) -> float:
    return 1.0 / (1.0 + penalty * max(0, edited - free_edits) / max(before, 1))


def combine(performance_delta: float, efficiency: float) -> float:
    """The one place delta and efficiency meet (see the module docstring for why the sign matters)."""
    if performance_delta >= 0:
        return performance_delta * efficiency
    return performance_delta * (2.0 - efficiency)


def unsupported_penalty(faithfulness: Faithfulness, config: RewardConfig) -> float:
    return min(config.max_unsupported_penalty, config.unsupported_token_cost * faithfulness.unsupported_tokens)


def efficiency_of_changes(changes: NamespaceChanges, config: RewardConfig = RewardConfig()) -> Efficiency:
    """memory_efficiency (size x density x change) of a fork's `changes_from(fork, base)`."""
    before, after, edited = changes.memories_before, changes.memories_after, changes.edited
    size = size_factor(before, after, config.size_penalty)
    density = density_factor(
        [len(normalized_tokens(m.content)) for m in changes.written], config.max_memory_tokens, config.density_penalty
    )
    change = change_factor(edited, before, config.free_edits, config.change_penalty)
    return Efficiency(size * density * change, size, density, change, before, after, edited)


def performance_delta(before: Sequence[QAScore], after: Sequence[QAScore], config: RewardConfig) -> tuple[float, float, float | None]:
    """(delta, target delta, mean collateral delta) with `before[0]`/`after[0]` the target."""
    deltas = [a.qa_score - b.qa_score for b, a in zip(before, after, strict=True)]
    if len(deltas) == 1:
        return deltas[0], deltas[0], None
    collateral = sum(deltas[1:]) / len(deltas[1:])
    return config.target_weight * deltas[0] + (1 - config.target_weight) * collateral, deltas[0], collateral


def score(store: MemoryStore, questions: Sequence[Question], config: RewardConfig) -> list[QAScore]:
    """The QA score of every question on `store` with the config's budget. With `qa="answerer"` the
    LLM's LoCoMo F1 replaces the proxy's credit, read from the same context."""
    scores = score_questions(store, questions, context_tokens=config.context_tokens, candidates=config.candidates)
    return _answered(store, questions, scores, config)


def _answered(store: MemoryStore, questions: Sequence[Question], scores: list[QAScore], config: RewardConfig) -> list[QAScore]:
    """`scores` with the answerer's F1 as the QA score when the config asks for it."""
    if config.qa == "proxy":
        return scores
    from memupdate.scoring.answerer import answerer_qa_scores

    f1 = answerer_qa_scores(_answerer(config, store), questions, [s.context for s in scores])
    return [replace(s, qa_score=value) for s, value in zip(scores, f1, strict=True)]


_answerers: dict[tuple, Any] = {}


def _answerer(config: RewardConfig, store: MemoryStore) -> Any:
    """One answerer per endpoint and database in this process (rollout workers score many episodes)."""
    from memupdate.scoring.answerer import make_answerer

    key = (config.answerer_model, config.answerer_base_url, config.answerer_api_key, str(store.engine.url))
    if key not in _answerers:
        _answerers[key] = make_answerer(
            config.answerer_model, config.answerer_base_url, config.answerer_api_key, engine=store.engine
        )
    return _answerers[key]


def scored_sides(
    base: MemoryStore, fork: MemoryStore, questions: Sequence[Question], config: RewardConfig
) -> tuple[list[QAScore], list[QAScore], NamespaceChanges, dict[str, MemoryRecord]]:
    """(base scores, fork scores, what the fork changed, the base's snapshot): the base's side is kept
    while its version holds (`base_cache`)."""
    # One read of what the fork changed serves its search, its efficiency and the base's version.
    fork_scores, changes = score_fork(base, fork, questions, context_tokens=config.context_tokens, candidates=config.candidates)
    fork_scores = _answered(fork, questions, fork_scores, config)
    version = changes.base_version
    base_snapshot = base_cache.lookup(base, version, [("snapshot",)], lambda _: [base.snapshot()])[0]
    return base_scores(base, questions, config, version), fork_scores, changes, base_snapshot


def base_scores(base: MemoryStore, questions: Sequence[Question], config: RewardConfig, version: Any = None) -> list[QAScore]:
    """The QA proxy of the untouched `base` on `questions`, kept while its version holds (`base_cache`)."""
    keys = [("qa", config.scoring_key, q.question, q.answer, q.category, tuple(q.evidence)) for q in questions]
    version = base.version() if version is None else version
    return base_cache.lookup(base, version, keys, lambda missing: score(base, [questions[i] for i in missing], config))


def base_faithfulness(base: MemoryStore, base_snapshot: dict[str, MemoryRecord], changes: NamespaceChanges) -> Faithfulness:
    """`faithfulness_of_writes` of the fork's writes, each base memory's source support kept while the
    base's version holds (`base_cache`): a write's sources are base memories, the same ones rollout after rollout."""
    supports = base_cache.lookup(base, changes.base_version, [("source_support",)], lambda _: [{}])[0]
    return faithfulness_of_writes(base, base_snapshot, changes.written, changes.nearest_keys, supports)


def compute_reward(
    base: MemoryStore, fork: MemoryStore, questions: Sequence[Question], config: RewardConfig = RewardConfig()
) -> RewardBreakdown:
    """Score the edited `fork` against the untouched `base`: `questions[0]` is the target, the rest
    collateral (`memupdate.scoring.questions.collateral_sample`). A fork equal to its base (or the base itself) scores exactly 0."""
    if not questions:
        raise ValueError("compute_reward needs at least one question with an answer")
    base_scores, fork_scores, changes, base_snapshot = scored_sides(base, fork, questions, config)
    delta, target_delta, collateral_delta = performance_delta(base_scores, fork_scores, config)
    return _breakdown(
        base, base_snapshot, changes, base_scores, fork_scores, config, _target_side, delta=delta,
        target_delta=target_delta, collateral_delta=collateral_delta, efficiency=efficiency_of_changes(changes, config),
    )


def compute_compaction_reward(
    base: MemoryStore,
    fork: MemoryStore,
    questions: Sequence[Question],
    neighbourhood: Sequence[str] | None = None,
    config: RewardConfig = RewardConfig(),
    failed_calls: int = 0,
) -> RewardBreakdown:
    """Score a compaction of `neighbourhood` (the bank keys its episode was given; None: the whole bank)
    on every question of the bank (see the module docstring); `failed_calls` are the episode's calls that
    did not run. A fork equal to its base, after no failed call, scores exactly 0."""
    if not questions:
        raise ValueError("compute_compaction_reward needs at least one question with an answer")
    base_scores, fork_scores, changes, base_snapshot = scored_sides(base, fork, questions, config)
    members = list(base_snapshot) if neighbourhood is None else list(neighbourhood)
    reach = max(1, reachable(questions, base_scores, [base_snapshot[k] for k in members if k in base_snapshot]))
    delta = sum(a.qa_score - b.qa_score for b, a in zip(base_scores, fork_scores, strict=True)) / reach
    size = len(members)
    efficiency = efficiency_of_changes(
        replace(changes, memories_before=size, memories_after=size + changes.memories_after - changes.memories_before), config
    )
    lost = lost_sources(base, fork) if changes.edited else 0
    coverage = min(config.max_unsupported_penalty, config.coverage_cost * lost)
    failed = config.failed_call_cost * failed_calls
    return _breakdown(
        base, base_snapshot, changes, base_scores, fork_scores, config, _mean_side, delta=delta, target_delta=delta,
        collateral_delta=None, efficiency=efficiency, costs=(coverage, failed), reach=reach, lost_sources=lost,
        coverage_penalty=coverage, failed_calls=failed_calls, failed_call_penalty=failed,
    )


def _target_side(scores: Sequence[QAScore]) -> tuple[float, int]:
    """A targeted episode's QA and context tokens on one side: its target question's (`scores[0]`)."""
    return scores[0].qa_score, scores[0].context_tokens


def _mean_side(scores: Sequence[QAScore]) -> tuple[float, int]:
    """A compaction's QA and context tokens on one side: the mean over every question of the bank."""
    return mean([s.qa_score for s in scores]), round(mean([s.context_tokens for s in scores]))


def _breakdown(
    base: MemoryStore, base_snapshot: dict[str, MemoryRecord], changes: NamespaceChanges, base_scores: Sequence[QAScore],
    fork_scores: Sequence[QAScore], config: RewardConfig, side: Callable[[Sequence[QAScore]], tuple[float, int]], *,
    delta: float, target_delta: float, collateral_delta: float | None, efficiency: Efficiency,
    costs: Sequence[float] = (), **compaction: Any,
) -> RewardBreakdown:
    """The one assembly of a breakdown: faithfulness and its penalty, the reward (`combine` less the penalty
    and each of `costs`, in order), each side's QA and context tokens as `side` reads them."""
    faithfulness = base_faithfulness(base, base_snapshot, changes)
    penalty = unsupported_penalty(faithfulness, config)
    reward = combine(delta, efficiency.value) - penalty
    for cost in costs:
        reward -= cost
    (qa_before, tokens_before), (qa_after, tokens_after) = side(base_scores), side(fork_scores)
    return RewardBreakdown(
        reward=reward,
        performance_delta=delta,
        target_delta=target_delta,
        collateral_delta=collateral_delta,
        qa_before=qa_before,
        qa_after=qa_after,
        context_tokens_before=tokens_before,
        context_tokens_after=tokens_after,
        efficiency=efficiency,
        faithfulness=faithfulness,
        unsupported_penalty=penalty,
        base_scores=tuple(base_scores),
        fork_scores=tuple(fork_scores),
        **compaction,
    )


def reachable(questions: Sequence[Question], base_scores: Sequence[QAScore], memories: Sequence[MemoryRecord]) -> int:
    """How many questions `memories` can affect: their base context holds one, or their evidence is in
    the memories' provenance (`dia_ids`)."""
    keys = {m.key for m in memories}
    turns = {turn for m in memories for turn in m.metadata.get("dia_ids") or ()}
    return sum(bool(keys.intersection(s.retrieved) or turns.intersection(q.evidence)) for q, s in zip(questions, base_scores, strict=True))


def lost_sources(bank: MemoryStore, fork: MemoryStore) -> int:
    """Bank memories whose words no result of their change keeps: the review's coverage flags."""
    from memupdate.bank.review import build_review

    return sum(len(change.coverage.missing) for change in build_review(bank, fork).changes)


def questions_from_extra_info(extra_info: Mapping[str, Any]) -> list[Question]:
    """The scored questions of a preprocessed verl row: the target first, then `extra_info["collateral"]`
    (written by `memupdate data preprocess`); the shape `compute_reward` takes."""
    return [qa_from_row(extra_info)] + [qa_from_row(row) for row in extra_info.get("collateral") or []]
