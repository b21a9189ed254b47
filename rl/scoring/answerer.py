"""An LLM answerer and judge on any OpenAI-compatible endpoint, scored with LoCoMo's own metrics.

    from memupdate.rl.scoring.answerer import make_answerer, answerer_qa_scores
    answerer = make_answerer("qwen2.5-7b-instruct", base_url="http://localhost:30000/v1",
                             judge="qwen2.5-7b-instruct", engine=store.engine)
    answerer.check()                                        # AnswererUnavailable: one line, before any work
    answers = answerer.answer(questions, contexts)          # one short answer per (question, context)
    verdicts = answerer.judge(questions, answers)           # True (CORRECT) / False (WRONG) / None (category 5)
    answerer_qa_scores(answerer, questions, contexts)       # LoCoMo F1 per question: a reward's QA term

The answerer reads exactly the context the QA proxy read (`QAScore.context`), so the proxy can be
checked against a reader: `answerer_report` gives F1, BLEU-1 and judge accuracy before and after
editing, per category, and the Pearson correlation of proxy score and answerer F1 over questions.

Prompts (all here, one definition each):
- answer: LoCoMo's RAG QA prompt (`task_eval/evaluate_gpts.py`, `QA_PROMPT`): the context, then "write
  an answer in the form of a short phrase … with exact words from the context", 32 tokens at most.
  Temporal questions (category 2) get LoCoMo's date hint appended to the question. LoCoMo's hint says
  "Use DATE of CONVERSATION"; our context is memories, not dated sessions, so it points at the dates in
  the context instead. Adversarial questions (category 5) are LoCoMo's two-choice form, "not mentioned"
  against the adversarial answer, in an order fixed by the question so reruns hit the cache.
- judge: Mem0's LoCoMo judge (`evaluation/metrics/llm_judge.py`, `ACCURACY_PROMPT`): generous CORRECT /
  WRONG against the gold answer, same topic or same date counts, label returned as JSON. Category 5 is
  not judged (as Mem0 does): its F1 already checks the refusal.
The wording of both is paraphrased from those files, keeping their structure and instructions.

Every reply is cached in PostgreSQL (`memupdate.store.llm_cache`) under the model, the template's hash,
the context's hash and the question as sent, and stored the moment it arrives: an eval that dies keeps
its answers, and a rerun asks only what is missing. Requests run at temperature 0, a few at a time,
with a timeout and a bounded number of retries.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from sqlalchemy import Engine

from memupdate.rl.data.locomo import ADVERSARIAL, TEMPORAL
from memupdate.rl.scoring.metrics import bleu1, locomo_f1
from memupdate.rl.scoring.summaries import by_category, mean
from memupdate.store.errors import MemupdateError
from memupdate.store.llm_cache import LLMReplyCache, ReplyKey, content_hash

ANSWER_MAX_TOKENS = 32  # LoCoMo's num_tokens_request for one answer
JUDGE_MAX_TOKENS = 256  # one sentence of reasoning, then the JSON label
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 2
DEFAULT_CONCURRENCY = 4
NOT_MENTIONED = "Not mentioned in the conversation"

ANSWER_TEMPLATE = """{context}

Based on the context above, write an answer to the following question as a short phrase. Use the exact words of the context wherever you can.

Question: {question} Short answer:"""

DATE_HINT = " Use the dates in the context to answer with an approximate date."

ADVERSARIAL_TEMPLATE = """{context}

Based on the context above, answer the following question.

Question: {question} Short answer:"""

ADVERSARIAL_CHOICES = " Select the correct answer: (a) {a} (b) {b}."

JUDGE_TEMPLATE = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You are given:
    (1) a question (asked by one user of another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer,
which you will score as CORRECT or WRONG.

The question asks about something one user should know about the other from their earlier conversations.
The gold answer is usually short and names the topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer may be much longer; be generous: if it touches on the same topic as the gold answer, it is CORRECT.

For questions about time, the gold answer is a specific date, month, year, etc. The generated answer may be longer or use relative references (like "last Tuesday" or "next month"); be generous: if it refers to the same date or period as the gold answer, it is CORRECT, even in another format (e.g. "May 7th" vs "7 May").

Now the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First give a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT write both CORRECT and WRONG in your response, or the evaluation breaks.

Return the label CORRECT or WRONG as JSON with the key "label"."""

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_LABEL_JSON = re.compile(r'"label"\s*:\s*"?\s*(CORRECT|WRONG)', re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(CORRECT|WRONG)\b")


class AnswererError(MemupdateError):
    """The answerer's or judge's endpoint failed or cannot be used."""


class AnswererUnavailable(AnswererError):
    """The endpoint does not answer, refuses the key, or does not serve the model."""


class AskedQuestion(Protocol):
    """What the answerer reads of a question (LoCoMo's `QAItem` is one)."""

    question: str
    answer: str | None
    category: int


@dataclass
class ChatEndpoint:
    """One model on an OpenAI-compatible `/chat/completions` endpoint, at temperature 0.

    `base_url=None` is OpenAI's API; `api_key` falls back to `$OPENAI_API_KEY`, then "EMPTY" (SGLang
    and vLLM accept any key). Transport errors, 429 and 5xx are retried `retries` times with backoff.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    role: str = "answerer"  # names the endpoint and its CLI option in errors

    def __post_init__(self) -> None:
        self.base_url = (self.base_url or "https://api.openai.com/v1").rstrip("/")
        key = self.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = httpx.Client(
            base_url=self.base_url, timeout=self.timeout, headers={"Authorization": f"Bearer {key}"}
        )
        self.requests = 0  # completions asked (not the check), for tests and the report
        self._count_lock = threading.Lock()  # requests run on several threads

    def check(self) -> None:
        """One cheap request (`GET /models`, or a 1-token completion where that is missing) that
        raises `AnswererUnavailable` naming the endpoint, the problem and the fix."""
        option = "--answerer-base-url"  # the judge shares the answerer's endpoint
        try:
            response = self._client.get("/models", timeout=min(self.timeout, 10.0))
            if response.status_code == 404:
                self._post_completion("ping", max_tokens=1, retries=0)
                return
        except httpx.HTTPError as exc:
            raise AnswererUnavailable(
                f"{self.role} endpoint {self.base_url} does not answer ({type(exc).__name__}: {exc}): "
                f"start the server or pass {option}"
            ) from None
        if response.status_code in (401, 403):
            raise AnswererUnavailable(
                f"{self.role} endpoint {self.base_url} refused the API key (HTTP {response.status_code}): "
                "pass --answerer-api-key or set OPENAI_API_KEY"
            )
        if response.status_code != 200:
            raise AnswererUnavailable(
                f"{self.role} endpoint {self.base_url} answered GET /models with HTTP {response.status_code}: "
                f"check that it is an OpenAI-compatible /v1 URL ({option})"
            )
        served = [m.get("id") for m in _json(response).get("data", []) if isinstance(m, dict)]
        if served and self.model not in served:
            raise AnswererUnavailable(
                f"{self.role} model {self.model!r} is not served at {self.base_url} (it serves "
                f"{', '.join(map(str, served[:5]))}): pass one of those to --{self.role}"
            )

    def complete(self, prompt: str, max_tokens: int) -> str:
        """The model's reply to one user message (reasoning blocks removed, whitespace stripped)."""
        with self._count_lock:
            self.requests += 1
        body = self._post_completion(prompt, max_tokens=max_tokens, retries=self.retries)
        try:
            content = body["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise AnswererError(
                f"{self.role} endpoint {self.base_url} sent no choices[0].message.content: {str(body)[:200]}"
            ) from None
        return _THINK.sub("", content).strip()

    def _post_completion(self, prompt: str, *, max_tokens: int, retries: int) -> dict[str, Any]:
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        for attempt in range(retries + 1):
            last = attempt == retries
            try:
                response = self._client.post("/chat/completions", json=payload)
            except httpx.TransportError as exc:
                if last:
                    raise AnswererError(
                        f"{self.role} endpoint {self.base_url} failed after {retries + 1} tries "
                        f"({type(exc).__name__}: {exc}); answers so far are cached, rerun to resume"
                    ) from None
            else:
                if response.status_code == 200:
                    return _json(response)
                retryable = response.status_code == 429 or response.status_code >= 500
                if last or not retryable:
                    raise AnswererError(
                        f"{self.role} endpoint {self.base_url} answered HTTP {response.status_code} for model "
                        f"{self.model!r} ({response.text[:200].strip()}); answers so far are cached, rerun to resume"
                    )
            time.sleep(2**attempt)  # 1 s, 2 s, ...: a busy server gets room to recover
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._client.close()


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}


@dataclass(frozen=True)
class AnswerPrompt:
    """One question as sent: its template (for the cache key), the question text and the full prompt."""

    template: str
    question: str
    prompt: str
    choices: dict[str, str] | None = None  # category 5: {"a": ..., "b": ...}


def answer_prompt(question: AskedQuestion, context: str) -> AnswerPrompt:
    """LoCoMo's prompt for one question over `context` (date hint for category 2, two choices for 5)."""
    text, template, choices = question.question, ANSWER_TEMPLATE, None
    if question.category == TEMPORAL:
        text += DATE_HINT
    elif question.category == ADVERSARIAL:
        template = ADVERSARIAL_TEMPLATE
        wrong = getattr(question, "adversarial_answer", None)
        if wrong:
            # LoCoMo flips a coin per question; a hash of the question fixes the coin so reruns hit the cache.
            first_is_refusal = int(content_hash(text)[-1], 16) % 2 == 0
            a, b = (NOT_MENTIONED, wrong) if first_is_refusal else (wrong, NOT_MENTIONED)
            choices = {"a": a, "b": b}
            text += ADVERSARIAL_CHOICES.format(a=a, b=b)
    return AnswerPrompt(template, text, template.format(context=context, question=text), choices)


def chosen_answer(reply: str, choices: dict[str, str] | None) -> str:
    """Category 5: map a bare "a", "(b)" reply to its option's text (LoCoMo's `get_cat_5_answer`)."""
    if not choices:
        return reply
    short = reply.strip().lower()
    if len(short) == 1:
        return choices["a"] if "a" in short else choices["b"]
    if len(short) == 3:
        return choices["a"] if "(a)" in short else choices["b"]
    return reply


def parse_judgement(reply: str) -> bool | None:
    """True for CORRECT, False for WRONG, None when the reply holds neither label."""
    found = _LABEL_JSON.findall(reply)
    if found:
        return found[-1].upper() == "CORRECT"
    words = _LABEL_WORD.findall(reply.upper())
    if words:
        return words[-1] == "CORRECT"  # the instruction puts the verdict last
    return None


class LLMAnswerer:
    """Answers questions from a context with one endpoint and judges the answers with another (or none)."""

    def __init__(
        self,
        answerer: ChatEndpoint,
        judge: ChatEndpoint | None = None,
        cache: LLMReplyCache | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
    ):
        self.answerer, self.judge_endpoint, self.cache = answerer, judge, cache
        self.concurrency = max(1, concurrency)

    @property
    def model(self) -> str:
        return self.answerer.model

    @property
    def judge_model(self) -> str | None:
        return self.judge_endpoint.model if self.judge_endpoint else None

    def use_cache(self, engine: Engine) -> None:
        """Cache replies in `engine`'s database from now on (the CLI checks the endpoint before it opens one)."""
        self.cache = LLMReplyCache(engine)

    def check(self) -> None:
        """Fail fast, before any work, when an endpoint cannot be used (see `ChatEndpoint.check`)."""
        self.answerer.check()
        if self.judge_endpoint is not None and (
            self.judge_endpoint.model != self.answerer.model or self.judge_endpoint.base_url != self.answerer.base_url
        ):
            self.judge_endpoint.check()

    def answer(
        self,
        questions: Sequence[AskedQuestion],
        contexts: Sequence[str],
        progress: Callable[[int, int], None] | None = None,
    ) -> list[str]:
        """One short answer per question, read from its context; cached replies are not asked again."""
        prompts = [answer_prompt(q, c) for q, c in zip(questions, contexts, strict=True)]
        keys = [
            ReplyKey("answer", self.answerer.model, content_hash(p.template), content_hash(c), p.question)
            for p, c in zip(prompts, contexts, strict=True)
        ]
        replies = self._ask(self.answerer, keys, [p.prompt for p in prompts], ANSWER_MAX_TOKENS, progress)
        return [chosen_answer(r, p.choices) for r, p in zip(replies, prompts, strict=True)]

    def judge(
        self,
        questions: Sequence[AskedQuestion],
        predictions: Sequence[str],
        progress: Callable[[int, int], None] | None = None,
    ) -> list[bool | None]:
        """The judge's verdict per answer: True/False, or None for category 5 and unparsable replies."""
        if self.judge_endpoint is None:
            raise AnswererError("no judge model: pass --judge MODEL")
        asked = [i for i, q in enumerate(questions) if q.category != ADVERSARIAL]
        template_hash = content_hash(JUDGE_TEMPLATE)
        keys, prompts = [], []
        for i in asked:
            question, gold = questions[i].question, questions[i].answer or ""
            keys.append(ReplyKey("judge", self.judge_endpoint.model, template_hash, content_hash(gold, predictions[i]), question))
            prompts.append(JUDGE_TEMPLATE.format(question=question, gold_answer=gold, generated_answer=predictions[i]))
        replies = self._ask(self.judge_endpoint, keys, prompts, JUDGE_MAX_TOKENS, progress)
        verdicts: list[bool | None] = [None] * len(questions)
        for i, reply in zip(asked, replies, strict=True):
            verdicts[i] = parse_judgement(reply)
        return verdicts

    def _ask(
        self,
        endpoint: ChatEndpoint,
        keys: list[ReplyKey],
        prompts: list[str],
        max_tokens: int,
        progress: Callable[[int, int], None] | None,
    ) -> list[str]:
        """Replies for `keys` in order: from the cache, else asked (each distinct key once) and stored."""
        known = self.cache.get_many(keys) if self.cache else {}
        missing = {key: prompt for key, prompt in zip(keys, prompts, strict=True) if key not in known}
        repeats = Counter(keys)  # a key asked twice (e.g. a no-op edit's before and after) is asked once
        done = len(keys) - sum(repeats[key] for key in missing)  # cached replies count as done
        if progress:
            progress(done, len(keys))

        def ask(key: ReplyKey, prompt: str) -> str:
            reply = endpoint.complete(prompt, max_tokens)
            if self.cache:
                self.cache.put(key, reply)  # at once: a run that dies later keeps this reply
            return reply

        with ThreadPoolExecutor(self.concurrency) as pool:
            futures = {key: pool.submit(ask, key, prompt) for key, prompt in missing.items()}
            try:
                for key, future in futures.items():
                    known[key] = future.result()
                    done += repeats[key]
                    if progress:
                        progress(done, len(keys))
            except BaseException:
                pool.shutdown(cancel_futures=True)  # a failed endpoint is not asked the rest of the queue
                raise
        return [known[key] for key in keys]

    def close(self) -> None:
        self.answerer.close()
        if self.judge_endpoint is not None:
            self.judge_endpoint.close()


def make_answerer(
    model: str,
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    judge: str | None = None,
    engine: Engine | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> LLMAnswerer:
    """An answerer (and judge, on the same endpoint) with replies cached in `engine`'s database."""
    answerer = ChatEndpoint(model, base_url, api_key, timeout=timeout, retries=retries, role="answerer")
    judge_endpoint = (
        ChatEndpoint(judge, base_url, api_key, timeout=timeout, retries=retries, role="judge") if judge else None
    )
    return LLMAnswerer(answerer, judge_endpoint, LLMReplyCache(engine) if engine is not None else None, concurrency)


def answerer_qa_scores(
    answerer: LLMAnswerer, questions: Sequence[AskedQuestion], contexts: Sequence[str]
) -> list[float]:
    """LoCoMo F1 of the answerer's answer per question: the QA term of a reward read by a frozen
    answerer (Memory-R1), in place of the proxy's score."""
    answers = answerer.answer(questions, contexts)
    return [locomo_f1(a, q.answer, q.category) for a, q in zip(answers, questions, strict=True)]


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than 2 points or when either side is constant."""
    n = len(xs)
    if n < 2:
        return None
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def answerer_report(
    answerer: LLMAnswerer,
    questions: Sequence[AskedQuestion],
    contexts: dict[str, Sequence[str]],
    proxy_scores: dict[str, Sequence[float]],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Answer (and judge) every question on each side ("before", "after") from its context.

    Returns the report section — per side: F1, BLEU-1, judge accuracy, overall and per category; and
    `proxy_f1_pearson` per side and over both — and one dict per question with its answers and scores.
    """
    sides = list(contexts)
    per_question: list[dict[str, Any]] = [{} for _ in questions]
    section: dict[str, Any] = {"model": answerer.model, "judge": answerer.judge_model}
    judged = sum(q.category != ADVERSARIAL for q in questions) if answerer.judge_endpoint else 0
    total = len(sides) * (len(questions) + judged)
    base = 0

    def step(done: int, _total: int) -> None:
        if progress:
            progress(base + done, total)

    pairs_all: list[tuple[float, float]] = []
    correlation: dict[str, float | None] = {}
    for side in sides:
        answers = answerer.answer(questions, contexts[side], step)
        base += len(questions)
        verdicts: list[bool | None] = [None] * len(questions)
        if answerer.judge_endpoint is not None:
            verdicts = answerer.judge(questions, answers, step)
            base += judged
        f1s = [locomo_f1(a, q.answer, q.category) for a, q in zip(answers, questions, strict=True)]
        bleus = [bleu1(a, q.answer or NOT_MENTIONED) for a, q in zip(answers, questions, strict=True)]
        for row, answer, f1, bleu, verdict in zip(per_question, answers, f1s, bleus, verdicts, strict=True):
            row[side] = {"answer": answer, "f1": f1, "bleu1": bleu, "judge": verdict}
        section[side] = _summary(questions, f1s, bleus, verdicts)
        pairs = list(zip(proxy_scores[side], f1s, strict=True))
        pairs_all += pairs
        correlation[side] = pearson([p for p, _ in pairs], [f for _, f in pairs])
    correlation["all"] = pearson([p for p, _ in pairs_all], [f for _, f in pairs_all])
    section["proxy_f1_pearson"] = correlation
    section["requests"] = answerer.answerer.requests + (answerer.judge_endpoint.requests if answerer.judge_endpoint else 0)
    return section, per_question


def _summary(
    questions: Sequence[AskedQuestion], f1s: list[float], bleus: list[float], verdicts: list[bool | None]
) -> dict[str, Any]:
    def block(indices: list[int]) -> dict[str, Any]:
        judged = [verdicts[i] for i in indices if verdicts[i] is not None]
        return {
            "questions": len(indices),
            "f1": mean([f1s[i] for i in indices]),
            "bleu1": mean([bleus[i] for i in indices]),
            "judge_accuracy": mean([float(v) for v in judged]) if judged else None,
            "judged": len(judged),
        }

    overall = block(list(range(len(questions))))
    overall["by_category"] = by_category(range(len(questions)), lambda i: questions[i].category, block)
    return overall


__all__ = [
    "ADVERSARIAL_TEMPLATE",
    "ANSWER_TEMPLATE",
    "DATE_HINT",
    "JUDGE_TEMPLATE",
    "AnswererError",
    "AnswererUnavailable",
    "ChatEndpoint",
    "LLMAnswerer",
    "answer_prompt",
    "answerer_qa_scores",
    "answerer_report",
    "make_answerer",
    "parse_judgement",
    "pearson",
]
