"""The QA proxy: how well a namespace answers questions, with no LLM.

    from memupdate.rl.qa_proxy import score_questions
    results = score_questions(store, conversation.qa)       # one QAScore per question
    results[0].qa_score, results[0].evidence_recall, results[0].context_words

For each question: retrieve the top-k memories by vector similarity (k=5), join their text in rank
order and cut it at a word budget (150 words in all), then
- `qa_score` = share of the answer's normalised tokens found among the context's tokens;
- `evidence_recall` = share of the question's evidence dia_ids covered by the provenance of the
  memories that fit whole inside the word budget.

Normalisation (`answer_tokens`): lowercase; punctuation becomes space (so "7 May, 2023" and
"7 may 2023" match, and numbers and dates compare as text); articles and a short list of function
words are dropped, unless nothing else is left. The word budget is what makes the proxy ungameable
by length: merging everything into a few huge memories only pushes answers past the cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from memupdate.store import MemoryStore, ScoredMemory

DEFAULT_TOP_K = 5
DEFAULT_WORD_BUDGET = 150
FUNCTION_WORDS = frozenset(
    "a an the of to in on at and or for with by from is was were be been are as it its that this her his their".split()
)
_PUNCTUATION = re.compile(r"[^\w\s]|_")


class Question(Protocol):
    """What the proxy reads of a question (LoCoMo's `QAItem` is one)."""

    question: str
    answer: str | None
    evidence: Sequence[str]


@dataclass(frozen=True)
class QAScore:
    qa_score: float
    evidence_recall: float | None  # None when the question lists no evidence
    context_words: int
    retrieved: tuple[str, ...]  # memory keys in rank order


def tokens(text: str) -> list[str]:
    """Lowercased word tokens with punctuation removed."""
    return _PUNCTUATION.sub(" ", text.lower()).split()


def answer_tokens(answer: str) -> set[str]:
    """The tokens an answer is scored on: `tokens` minus articles and function words (kept if that is all)."""
    words = set(tokens(answer))
    return (words - FUNCTION_WORDS) or words


def build_context(hits: Sequence[ScoredMemory], word_budget: int) -> tuple[list[str], list[ScoredMemory]]:
    """The context words (rank order, cut at `word_budget`) and the hits that fit whole inside it."""
    words: list[str] = []
    whole: list[ScoredMemory] = []
    for hit in hits:
        memory_words = hit.memory.content.split()
        room = word_budget - len(words)
        if room <= 0:
            break
        if len(memory_words) <= room:
            whole.append(hit)
        words.extend(memory_words[:room])
    return words, whole


def qa_overlap(answer: str, context_words: Sequence[str]) -> float:
    """Share of the answer's tokens present in the context."""
    wanted = answer_tokens(answer)
    if not wanted:
        return 0.0
    have = set(tokens(" ".join(context_words)))
    return len(wanted & have) / len(wanted)


def evidence_recall(evidence: Sequence[str], hits: Sequence[ScoredMemory]) -> float | None:
    if not evidence:
        return None
    covered = {dia_id for hit in hits for dia_id in hit.memory.metadata.get("dia_ids", [])}
    return len(set(evidence) & covered) / len(set(evidence))


def score_questions(
    store: MemoryStore,
    questions: Sequence[Question],
    *,
    top_k: int = DEFAULT_TOP_K,
    word_budget: int = DEFAULT_WORD_BUDGET,
) -> list[QAScore]:
    """Score every question against `store`'s namespace; questions are embedded once, in one batch
    (and cached by the embedder, so scoring the base and its forks embeds each question once)."""
    vectors = store.embedder.embed([q.question for q in questions])
    results = []
    for question, vector in zip(questions, vectors, strict=True):
        hits = store.search_by_vector(vector, top_k)
        words, whole = build_context(hits, word_budget)
        results.append(
            QAScore(
                qa_score=qa_overlap(question.answer or "", words),
                evidence_recall=evidence_recall(question.evidence, whole),
                context_words=len(words),
                retrieved=tuple(hit.memory.key for hit in hits),
            )
        )
    return results
