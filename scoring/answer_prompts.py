"""The answerer's and judge's prompts, one definition each, and how their replies are read.

    from memupdate.scoring.answer_prompts import answer_prompt, chosen_answer, parse_judgement
    prompt = answer_prompt(question, context)      # AnswerPrompt: template, question as sent, full prompt
    chosen_answer("a", prompt.choices)             # category 5: the option's text
    parse_judgement('Same date. {"label": "CORRECT"}')   # True

- answer: LoCoMo's RAG QA prompt (`task_eval/evaluate_gpts.py`, `QA_PROMPT`): the context, then "write
  an answer in the form of a short phrase … with exact words from the context", 32 tokens at most.
  Temporal questions (category 2) get LoCoMo's date hint appended to the question. LoCoMo's hint says
  "Use DATE of CONVERSATION"; our context is memories, not dated sessions, so it points at the dates in
  the context instead. Adversarial questions (category 5) are LoCoMo's two-choice form, "not mentioned"
  against the adversarial answer, in an order fixed by the question so reruns hit the cache.
- judge: Mem0's LoCoMo judge (`evaluation/metrics/llm_judge.py`, `ACCURACY_PROMPT`): generous CORRECT /
  WRONG against the gold answer, same topic or same date counts, label returned as JSON. Category 5 is
  not judged (as Mem0 does): its F1 already checks the refusal.
The wording of both is paraphrased from those files, keeping their structure and instructions. Every
reader (an endpoint or a local checkpoint) is sent the prompt as one user message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from memupdate.scoring.categories import ADVERSARIAL, TEMPORAL
from memupdate.scoring.llm_cache import prompt_digest

ANSWER_MAX_TOKENS = 32  # LoCoMo's num_tokens_request for one answer
JUDGE_MAX_TOKENS = 256  # one sentence of reasoning, then the JSON label
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


class AskedQuestion(Protocol):
    """What the answerer reads of a question (LoCoMo's `QAItem` is one)."""

    question: str
    answer: str | None
    category: int


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
            first_is_refusal = int(prompt_digest(text)[-1], 16) % 2 == 0
            a, b = (NOT_MENTIONED, wrong) if first_is_refusal else (wrong, NOT_MENTIONED)
            choices = {"a": a, "b": b}
            text += ADVERSARIAL_CHOICES.format(a=a, b=b)
    return AnswerPrompt(template, text, template.format(context=context, question=text), choices)


def judge_prompt(question: AskedQuestion, prediction: str) -> str:
    """Mem0's judge prompt for one generated answer against the gold one."""
    return JUDGE_TEMPLATE.format(question=question.question, gold_answer=question.answer or "", generated_answer=prediction)


def clean_reply(text: str) -> str:
    """A reader's reply without reasoning blocks (`<think>…</think>`) and surrounding whitespace."""
    return _THINK.sub("", text).strip()


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


__all__ = [
    "ADVERSARIAL_TEMPLATE",
    "ANSWER_MAX_TOKENS",
    "ANSWER_TEMPLATE",
    "DATE_HINT",
    "JUDGE_MAX_TOKENS",
    "JUDGE_TEMPLATE",
    "NOT_MENTIONED",
    "AnswerPrompt",
    "AskedQuestion",
    "answer_prompt",
    "chosen_answer",
    "clean_reply",
    "judge_prompt",
    "parse_judgement",
]
