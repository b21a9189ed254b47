"""An LLM answerer and judge, on any OpenAI-compatible endpoint or a local checkpoint, with every reply cached.

    from memupdate.scoring.answerer import make_answerer, answerer_qa_scores
    answerer = make_answerer("qwen2.5-7b-instruct", base_url="http://localhost:30000/v1",
                             judge="qwen2.5-7b-instruct", engine=store.engine)
    answerer = make_answerer("hf:checkpoints/smollm2", engine=store.engine)   # CPU, no server
    answerer.check()                                        # AnswererUnavailable: one line, before any work
    answers = answerer.answer(questions, contexts)          # one short answer per (question, context)
    verdicts = answerer.judge(questions, answers)           # True (CORRECT) / False (WRONG) / None (category 5)
    answerer_qa_scores(answerer, questions, contexts)       # LoCoMo F1 per question: a reward's QA term

The answerer reads exactly the context the QA proxy read (`QAScore.context`), so the proxy can be
checked against a reader (`answer_report.answerer_report`). Prompts: `answer_prompts.py`; readers
(endpoint or checkpoint): `readers.py`.

Every reply is cached in PostgreSQL (`memupdate.scoring.llm_cache`) under the reader's cache name, the
template's hash, the context's hash and the question as sent, and stored the moment it arrives: an
eval that dies keeps its answers, and a rerun asks only what is missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine

from memupdate.llm.models import resolve_model
from memupdate.openai_endpoint import DEFAULT_RETRIES
from memupdate.scoring.answer_prompts import (
    ANSWER_MAX_TOKENS,
    JUDGE_MAX_TOKENS,
    JUDGE_TEMPLATE,
    AskedQuestion,
    answer_prompt,
    chosen_answer,
    judge_prompt,
    parse_judgement,
)
from memupdate.scoring.categories import ADVERSARIAL
from memupdate.scoring.hf_reader import HFReader
from memupdate.scoring.llm_cache import LLMReplyCache, ReplyKey, prompt_digest
from memupdate.scoring.metrics import locomo_f1
from memupdate.scoring.readers import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    HF_PREFIX,
    AnswererError,
    ChatEndpoint,
    Reader,
)

Progress = Callable[[int, int], None]


class LLMAnswerer:
    """Answers questions from a context with one reader and judges the answers with another (or none)."""

    def __init__(self, answerer: Reader, judge: Reader | None = None, cache: LLMReplyCache | None = None):
        self.answerer, self.judge_endpoint, self.cache = answerer, judge, cache

    @property
    def model(self) -> str:
        return self.answerer.model

    @property
    def judge_model(self) -> str | None:
        return self.judge_endpoint.model if self.judge_endpoint else None

    @property
    def requests(self) -> int:
        """Prompts sent to a reader (not answered from the cache), answerer and judge together."""
        return self.answerer.requests + (self.judge_endpoint.requests if self.judge_endpoint else 0)

    def use_cache(self, engine: Engine) -> None:
        """Cache replies in `engine`'s database from now on (the CLI checks the reader before it opens one)."""
        self.cache = LLMReplyCache(engine)

    def check(self) -> None:
        """Fail fast, before any work, when a reader cannot be used (see `ChatEndpoint.check`)."""
        self.answerer.check()
        judge = self.judge_endpoint
        if judge is not None and (judge.model, judge.location) != (self.answerer.model, self.answerer.location):
            judge.check()

    def answer(
        self, questions: Sequence[AskedQuestion], contexts: Sequence[str], progress: Progress | None = None
    ) -> list[str]:
        """One short answer per question, read from its context; cached replies are not asked again."""
        prompts = [answer_prompt(q, c) for q, c in zip(questions, contexts, strict=True)]
        name = self.answerer.cache_name
        keys = [
            ReplyKey("answer", name, prompt_digest(p.template), prompt_digest(c), p.question)
            for p, c in zip(prompts, contexts, strict=True)
        ]
        replies = self._ask(self.answerer, keys, [p.prompt for p in prompts], ANSWER_MAX_TOKENS, progress)
        return [chosen_answer(r, p.choices) for r, p in zip(replies, prompts, strict=True)]

    def judge(
        self, questions: Sequence[AskedQuestion], predictions: Sequence[str], progress: Progress | None = None
    ) -> list[bool | None]:
        """The judge's verdict per answer: True/False, or None for category 5 and unparsable replies."""
        if self.judge_endpoint is None:
            raise AnswererError("no judge model: pass --judge MODEL")
        asked = [i for i, q in enumerate(questions) if q.category != ADVERSARIAL]
        template_hash, name = prompt_digest(JUDGE_TEMPLATE), self.judge_endpoint.cache_name
        keys = [
            ReplyKey("judge", name, template_hash, prompt_digest(questions[i].answer or "", predictions[i]), questions[i].question)
            for i in asked
        ]
        prompts = [judge_prompt(questions[i], predictions[i]) for i in asked]
        replies = self._ask(self.judge_endpoint, keys, prompts, JUDGE_MAX_TOKENS, progress)
        verdicts: list[bool | None] = [None] * len(questions)
        for i, reply in zip(asked, replies, strict=True):
            verdicts[i] = parse_judgement(reply)
        return verdicts

    def _ask(
        self, reader: Reader, keys: list[ReplyKey], prompts: list[str], max_tokens: int, progress: Progress | None
    ) -> list[str]:
        """Replies for `keys` in order: from the cache, else asked (each distinct key once) and stored."""
        known = self.cache.get_many(keys) if self.cache else {}
        missing = {key: prompt for key, prompt in zip(keys, prompts, strict=True) if key not in known}
        repeats = Counter(keys)  # a key asked twice (e.g. a no-op edit's before and after) is asked once
        done = len(keys) - sum(repeats[key] for key in missing)  # cached replies count as done
        if progress:
            progress(done, len(keys))
        # Similar lengths batch together: a padded batch costs its longest prompt.
        order = sorted(missing, key=lambda key: len(missing[key]))
        batches = [order[i : i + reader.batch_size] for i in range(0, len(order), reader.batch_size)]

        def ask(batch: list[ReplyKey]) -> list[str]:
            replies = reader.complete_batch([missing[key] for key in batch], max_tokens)
            if self.cache:
                for key, reply in zip(batch, replies, strict=True):
                    self.cache.put(key, reply)  # at once: a run that dies later keeps this reply
            return replies

        with ThreadPoolExecutor(max(1, reader.concurrency)) as pool:
            futures = [(batch, pool.submit(ask, batch)) for batch in batches]
            try:
                for batch, future in futures:
                    for key, reply in zip(batch, future.result(), strict=True):
                        known[key] = reply
                        done += repeats[key]
                    if progress:
                        progress(done, len(keys))
            except BaseException:
                pool.shutdown(cancel_futures=True)  # a failed reader is not asked the rest of the queue
                raise
        return [known[key] for key in keys]

    def close(self) -> None:
        self.answerer.close()
        if self.judge_endpoint is not None:
            self.judge_endpoint.close()


def make_reader(
    model: str,
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    role: str = "answerer",
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Reader:
    """`hf:DIR` is a local checkpoint on the CPU (`HFReader`; `hf:smollm2` the packaged model); any other
    name a model on the endpoint."""
    if model.startswith(HF_PREFIX):
        return HFReader(resolve_model(model.removeprefix(HF_PREFIX)), role=role)
    return ChatEndpoint(model, base_url, api_key, timeout=timeout, retries=retries, role=role, concurrency=concurrency)


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
    """An answerer (and judge) with replies cached in `engine`'s database. `model` (and `judge`) name a
    model on the endpoint `base_url`, or `hf:DIR`, a local checkpoint that answers on the CPU."""
    options = {"timeout": timeout, "retries": retries, "concurrency": concurrency}
    answerer = make_reader(model, base_url, api_key, role="answerer", **options)
    judge_reader = make_reader(judge, base_url, api_key, role="judge", **options) if judge else None
    return LLMAnswerer(answerer, judge_reader, LLMReplyCache(engine) if engine is not None else None)


def answerer_qa_scores(
    answerer: LLMAnswerer, questions: Sequence[AskedQuestion], contexts: Sequence[str]
) -> list[float]:
    """LoCoMo F1 of the answerer's answer per question: the QA term of a reward read by a frozen
    answerer (Memory-R1), in place of the proxy's score."""
    answers = answerer.answer(questions, contexts)
    return [locomo_f1(a, q.answer, q.category) for a, q in zip(answers, questions, strict=True)]


__all__ = ["LLMAnswerer", "answerer_qa_scores", "make_answerer"]
