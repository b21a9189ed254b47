"""The QA proxy: how well a namespace answers questions, with no LLM.

    from memupdate.scoring.qa_proxy import score_questions
    results = score_questions(store, conversation.qa)       # one QAScore per question
    results[0].qa_score, results[0].evidence_recall, results[0].context_tokens, results[0].context

For each question, the proxy reads what a retrieval-augmented answerer would read, and asks whether
the answer is there as a phrase:
1. **Context, length-fair.** Memories in vector-rank order (up to `candidates` of them) fill a fixed
   budget of `context_tokens` tokens, the same budget for a base and its forks. Tokens are LoCoMo's
   normalised, stemmed answer tokens (`scoring/metrics.py`), the very tokens the score counts, so no
   punctuation or spacing trick packs more into the budget: a comma-joined blob is one token.
2. **Phrase-level credit, from memories about the question.** Each gold piece (category 1 answers are
   comma-separated lists, category 3 answers stop at the first `;`, as in LoCoMo's scoring) earns the
   LoCoMo F1 of an answer-sized window of one memory's tokens; a bag of candidate tokens spread over a
   memory earns little: the window must hold the answer's tokens together. Only a memory *about the
   question* earns: one whose provenance (`dia_ids`) holds some of the question's evidence, or whose
   tokens hold more than half of the question's content tokens (its tokens that are not stop words). A
   date written into an unrelated memory earns nothing.
3. **A rival value costs.** A memory that holds every content token of the question, is not from its
   evidence, and holds no piece of the answer is a *rival* (it says all the question asks with another
   value: the stale "X's sport is ice hockey" for "What is X's sport?" answered "pesäpallo"). A piece's
   credit from memory i is its F1 there × the *consistent share* at i: of the holders (memories about the
   question that hold some piece of the answer) and rivals ranked at or above i, the holders' share; the
   piece takes its best credit over the memories. The answer under one rival earns half; a rival below
   the answer, or none, costs nothing: the credit is then the best window's F1 over the memories about
   the question.
4. **Adversarial questions** (category 5) score 0 on every side: a retrieval proxy cannot tell a right
   refusal from missing memory, so writing "not mentioned" can only cost (context budget, faithfulness).
   The LLM answerer (`scoring/answerer.py`) scores them with LoCoMo's own rule.
`evidence_recall` is the share of the question's evidence dia_ids covered by the provenance of the
memories that fit whole in the budget.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Protocol

import numpy as np

from memupdate.scoring.base_cache import base_cache
from memupdate.scoring.categories import ADVERSARIAL
from memupdate.scoring.faithfulness import NEAREST_SOURCES
from memupdate.scoring.metrics import answer_parts, normalized_tokens, token_f1
from memupdate.settings import DEFAULT_CONTEXT_TOKENS
from memupdate.store import MemoryStore, NamespaceChanges, ScoredMemory, changes_from
from memupdate.text.strategies import STOPWORDS

DEFAULT_CANDIDATES = 20
# score_fork keeps this many times `candidates` of the base's hits per question: a fork that replaces
# more than the surplus among them is searched directly instead.
BASE_HITS_FACTOR = 2


@cache
def question_stop_tokens() -> frozenset[str]:
    """What a question's content tokens leave out: stop words (question words, auxiliaries) as the proxy
    tokenises them (stemmed on first use: nltk loads with the first stem)."""
    return frozenset(token for word in STOPWORDS for token in normalized_tokens(word))


class Question(Protocol):
    """What the proxy reads of a question (LoCoMo's `QAItem` is one)."""

    question: str
    answer: str | None
    evidence: Sequence[str]
    category: int


@dataclass(frozen=True)
class QAScore:
    qa_score: float
    evidence_recall: float | None  # None when the question lists no evidence
    context_tokens: int
    retrieved: tuple[str, ...]  # keys of the memories that entered the context, in rank order
    context: str  # the text read: one memory (or the part of it that fit) per line


@dataclass(frozen=True)
class Context:
    """What fits in the budget: each memory's tokens (windows never cross memories), text, key and
    provenance (its `dia_ids`), in rank order."""

    segments: tuple[tuple[str, ...], ...]
    texts: tuple[str, ...]
    keys: tuple[str, ...]
    whole: tuple[ScoredMemory, ...]  # the memories that fit entirely
    provenance: tuple[frozenset[str], ...]

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.segments)

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


def build_context(hits: Sequence[ScoredMemory], budget: int) -> Context:
    """Fill `budget` tokens with `hits` in rank order; the last memory may be cut at a word boundary."""
    segments, texts, keys, whole, provenance = [], [], [], [], []
    used = 0
    for hit in hits:
        if used >= budget:
            break
        memory = _memory_tokens(hit.memory.content)
        # Words enter while the tokens so far fit: the words whose running token count fits the room left.
        fitting = bisect_right(memory.running, budget - used)
        if fitting == 0:
            break
        if fitting == len(memory.words):
            whole.append(hit)
            segment, text = memory.tokens, memory.text
        else:
            segment, text = memory.tokens[: memory.running[fitting - 1]], " ".join(memory.words[:fitting])
        used += len(segment)
        segments.append(segment)
        texts.append(text)
        keys.append(hit.memory.key)
        provenance.append(frozenset(hit.memory.metadata.get("dia_ids") or ()))
    return Context(tuple(segments), tuple(texts), tuple(keys), tuple(whole), tuple(provenance))


@dataclass(frozen=True)
class _MemoryTokens:
    words: tuple[str, ...]
    tokens: tuple[str, ...]  # every word's normalised tokens, in order
    running: tuple[int, ...]  # tokens up to and including each word (never decreasing)
    text: str  # the words joined by single spaces


@lru_cache(maxsize=65536)
def _memory_tokens(content: str) -> _MemoryTokens:
    """Each word of `content` with its normalised tokens, kept per text: a base and its forks share most
    memories, so each text is tokenised once per process."""
    words = tuple(content.split())
    tokens: list[str] = []
    running = []
    for word in words:
        tokens.extend(normalized_tokens(word))
        running.append(len(tokens))
    return _MemoryTokens(words, tuple(tokens), tuple(running), " ".join(words))


def phrase_f1(gold: Sequence[str], segments: Sequence[Sequence[str]]) -> float:
    """The best LoCoMo F1 between `gold` tokens and any window of `len(gold)` tokens of one segment."""
    if not gold:
        return 0.0
    wanted, size, best = set(gold), len(gold), 0.0
    for segment in segments:
        if len(segment) <= size:
            if wanted & set(segment):
                best = max(best, token_f1(segment, gold))
            continue
        starts = {
            start
            for position, token in enumerate(segment)
            if token in wanted
            for start in range(max(0, position - size + 1), min(position, len(segment) - size) + 1)
        }
        for start in starts:
            best = max(best, token_f1(segment[start : start + size], gold))
            if best == 1.0:
                return best
    return best


@lru_cache(maxsize=65536)
def question_words(question: str) -> frozenset[str]:
    """The question's content tokens: its normalised, stemmed tokens that are not stop words."""
    return frozenset(normalized_tokens(question)) - question_stop_tokens()


def qa_score(question: Question, context: Context) -> float:
    """Credit for the question's answer in `context` (0 for adversarial questions): each piece's best
    phrase F1 in a memory about the question times the consistent share there (see the module docstring)."""
    if question.category == ADVERSARIAL or not question.answer:
        return 0.0
    parts = [normalized_tokens(part) for part in answer_parts(question.answer, question.category)]
    parts = [part for part in parts if part]
    if not parts:
        return 0.0
    words, evidence = question_words(question.question), frozenset(question.evidence)
    holders = rivals = 0  # so far, in rank order
    best = [0.0] * len(parts)
    for segment, turns in zip(context.segments, context.provenance, strict=True):
        by_evidence = not evidence.isdisjoint(turns)
        shared = len(words.intersection(segment))
        if not (by_evidence or 2 * shared > len(words)):
            continue  # not about the question: neither credit nor rival
        f1s = [phrase_f1(part, [segment]) for part in parts]
        if not any(f1s):
            # A memory of the question's own evidence is never a rival; a rival says all the question says.
            rivals += not by_evidence and shared == len(words)
            continue
        holders += 1
        share = holders / (holders + rivals)
        best = [max(b, f1 * share) for b, f1 in zip(best, f1s, strict=True)]
    return sum(best) / len(parts)


def evidence_recall(evidence: Sequence[str], hits: Sequence[ScoredMemory]) -> float | None:
    if not evidence:
        return None
    covered = {dia_id for hit in hits for dia_id in hit.memory.metadata.get("dia_ids", [])}
    return len(set(evidence) & covered) / len(set(evidence))


def score_questions(
    store: MemoryStore,
    questions: Sequence[Question],
    *,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    candidates: int = DEFAULT_CANDIDATES,
) -> list[QAScore]:
    """Score every question against `store`'s namespace; questions are embedded once, in one batch
    (and cached by the embedder, so scoring the base and its forks embeds each question once), and
    searched in one statement."""
    if not questions:
        return []
    vectors = store.embedder.embed([q.question for q in questions])
    return [_score(question, build_context(hits, context_tokens))
            for question, hits in zip(questions, store.search_many_by_vector(vectors, candidates), strict=True)]


def score_fork(
    base: MemoryStore,
    fork: MemoryStore,
    questions: Sequence[Question],
    *,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    candidates: int = DEFAULT_CANDIDATES,
) -> tuple[list[QAScore], NamespaceChanges]:
    """`score_questions(fork, ...)` and `changes_from(fork, base)`, from one read of what the fork changed.

    A fork differs from its base by a few memories, so its hits for a question are the base's (searched
    once per question and kept while the base's version stays the same) minus the memories the fork
    replaced, plus its new and edited memories ranked by the same distances: the same hits, in the same
    order, as searching the fork. A fork that replaced too many of the base's hits is searched directly.
    A question whose top hits are the base's very hits (most collateral questions) scores what it
    scores on the base, computed once and kept while the base's version holds.
    """
    vectors = fork.embedder.embed([q.question for q in questions])
    changes = changes_from(fork, base, vectors, nearest=NEAREST_SOURCES)  # faithfulness's sources, same trip
    depth = candidates * BASE_HITS_FACTOR
    vector_keys = [np.asarray(v, dtype=np.float32).tobytes() for v in vectors]
    base_hits = _base_hits(base, vectors, vector_keys, depth, changes.base_version)
    results: list[QAScore | None] = []
    unchanged = []  # questions whose top hits on the fork are the base's very hits: the base's score holds
    for i, (question, vector) in enumerate(zip(questions, vectors, strict=True)):
        if _top_holds(base_hits[i], changes.replaced, changes.changed_hits[i], candidates):
            unchanged.append(i)
            results.append(None)
            continue
        kept = [hit for hit in base_hits[i].hits if hit[1].memory.key not in changes.replaced]
        if len(kept) >= candidates or len(base_hits[i].hits) < depth:  # else unseen base memories may rank in
            ranked = sorted(kept + changes.changed_hits[i], key=_rank)
            top = ranked[:candidates]
            if _same_entries(top, base_hits[i].hits[:candidates]):
                unchanged.append(i)
                results.append(None)
                continue
            hits = [hit for _, hit in top]
        else:
            hits = fork.search_by_vector(vector, candidates)
        results.append(_score(question, build_context(hits, context_tokens)))
    kept_scores = _kept_scores(
        base, changes.base_version, [questions[i] for i in unchanged], [vector_keys[i] for i in unchanged],
        [base_hits[i].hits[:candidates] for i in unchanged], context_tokens,
    )
    for i, kept_score in zip(unchanged, kept_scores, strict=True):
        results[i] = kept_score
    return results, changes


def _rank(hit: tuple[float, ScoredMemory]) -> tuple[float, str]:
    """What a search ranks a (distance, hit) by: the distance, then the key."""
    return hit[0], hit[1].memory.key


@dataclass(frozen=True)
class _BaseRanking:
    """The base's top (distance, hit) entries for one question vector, as its search ranks them."""

    hits: list[tuple[float, ScoredMemory]]
    keys: tuple[str, ...]
    # Strictly in `_rank` order (the database's collation may break a tie of distances otherwise): only
    # then can a fork's top be checked without sorting (`_top_holds`).
    in_rank_order: bool

    @classmethod
    def of(cls, hits: list[tuple[float, ScoredMemory]]) -> _BaseRanking:
        ranks = [_rank(hit) for hit in hits]
        return cls(hits, tuple(key for _, key in ranks), all(a < b for a, b in zip(ranks, ranks[1:], strict=False)))


def _top_holds(base: _BaseRanking, replaced: frozenset[str], changed: list, candidates: int) -> bool:
    """Whether sorting the base's hits less `replaced` with the fork's `changed` hits gives the base's
    very top `candidates` entries, decided without sorting: none of them replaced, and every changed hit
    ranked below the last of them. False when that cannot be told so (the long way then decides)."""
    if not base.in_rank_order or not replaced.isdisjoint(base.keys[:candidates]):
        return False
    if len(base.hits) < candidates:  # every base hit is in the top: a changed hit would join it
        return not changed
    last = _rank(base.hits[candidates - 1])
    return all(_rank(hit) > last for hit in changed)


def _same_entries(fork_top: list, base_top: list) -> bool:
    """Whether the fork's top (distance, hit) entries are the base's very entries, in the same order."""
    return len(fork_top) == len(base_top) and all(a is b for a, b in zip(fork_top, base_top, strict=True))


def _kept_scores(
    base: MemoryStore, version: tuple, questions: Sequence[Question], vector_keys: Sequence[bytes],
    tops: Sequence[list], context_tokens: int,
) -> list[QAScore]:
    """Each question's score on the base's top (distance, hit) entries `tops`, kept while `version` holds."""
    if not questions:
        return []
    keys = [
        ("score", vector_key, len(top), context_tokens, q.question, q.answer, q.category, tuple(q.evidence))
        for q, vector_key, top in zip(questions, vector_keys, tops, strict=True)
    ]
    return base_cache.lookup(
        base, version, keys,
        lambda missing: [_score(questions[m], build_context([hit for _, hit in tops[m]], context_tokens)) for m in missing],
    )


def _base_hits(
    base: MemoryStore, vectors: Sequence, vector_keys: Sequence[bytes], depth: int, version: tuple
) -> list[_BaseRanking]:
    """The base's top `depth` (distance, hit) per vector (`vector_keys`: its bytes), kept while `version` holds."""
    keys = [("hits", depth, vector_key) for vector_key in vector_keys]
    return base_cache.lookup(
        base, version, keys,
        lambda missing: [_BaseRanking.of(hits) for hits in base.ranked_many_by_vector([vectors[i] for i in missing], depth)],
    )


def _score(question: Question, context: Context) -> QAScore:
    return QAScore(
        qa_score=qa_score(question, context),
        evidence_recall=evidence_recall(question.evidence, context.whole),
        context_tokens=context.tokens,
        retrieved=context.keys,
        context=context.text,
    )
