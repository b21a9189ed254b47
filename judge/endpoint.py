"""A judge on any OpenAI-compatible endpoint: one chat call a pair, a JSON-schema reply, replies cached.

    from memupdate.judge.endpoint import EndpointJudge
    judge = EndpointJudge("gpt-4o-mini", base_url=None, cache=LLMReplyCache(engine))   # what peers do
    judge.judge([(Statement("Sam lives in Paris"), Statement("Sam moved to Berlin"))])

The prompt shows both statements with their times and asks for {"relation", "current", "confidence"};
`response_format` carries the schema where the server honours it, and a reply is read leniently (the
first JSON object in it) where it does not. An unreadable reply is a `compatible` verdict at
confidence 0: the safe reading (leave both), counted in `unreadable`. `cache`: anything with
`get_many(keys)` and `put(key, reply)` over `ReplyKey`-shaped keys (the answerer's reply cache).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from memupdate.judge.decision import AutoApply
from memupdate.judge.verdict import RELATIONS, Pair, Statement, Verdict, later

PROMPT = """You keep a user's long-term memory. Two memories were written at different times. How do they relate?
- "duplicate": both state the same fact (one may add detail).
- "update": the same subject and attribute with a new value or state; only one can be true now.
- "compatible": both can be true at once (different attributes, or an attribute that holds several values).
- "events": two occurrences of one kind of event (two trips, two dinners); both happened.
For an update, "current" is the memory that holds now: "first" or "second" (usually the later one).

First memory ({first_time}): {first}
Second memory ({second_time}): {second}

Reply with JSON only: {{"relation": "...", "current": "first" | "second" | null, "confidence": 0.0-1.0}}"""

SCHEMA = {
    "type": "object",
    "properties": {
        "relation": {"type": "string", "enum": list(RELATIONS)},
        "current": {"type": ["string", "null"], "enum": ["first", "second", None]},
        "confidence": {"type": "number"},
    },
    "required": ["relation", "current", "confidence"],
}
TEMPLATE_HASH = hashlib.sha256(PROMPT.encode()).hexdigest()[:16]
_OBJECT = re.compile(r"\{.*?\}", re.S)


class CacheKey(NamedTuple):  # the shape of `scoring.llm_cache.ReplyKey`
    kind: str
    model: str
    template_hash: str
    input_hash: str
    question: str


class ReplyCache(Protocol):
    def get_many(self, keys: Sequence[Any]) -> dict[Any, str]: ...

    def put(self, key: Any, reply: str) -> None: ...


def prompt_for(first: Statement, second: Statement) -> str:
    return PROMPT.format(first=first.text, second=second.text, first_time=first.time or "time unknown",
                         second_time=second.time or "time unknown")


def read_reply(reply: str, first: Statement, second: Statement) -> Verdict | None:
    """The verdict a reply states; None when it states none."""
    match = _OBJECT.search(reply or "")
    try:
        data = json.loads(match.group(0)) if match else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or data.get("relation") not in RELATIONS:
        return None
    try:
        confidence = min(1.0, max(0.0, float(data.get("confidence", 1.0))))
    except (TypeError, ValueError):
        confidence = 1.0
    current = data.get("current") if data.get("current") in ("first", "second") else None
    if data["relation"] != "update":
        current = None
    elif current is None:
        current = later(first, second)
    return Verdict(data["relation"], confidence, current)


class EndpointJudge:
    """One call a pair to `model` on `base_url` (None: OpenAI), cached in `cache` when given."""

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 cache: ReplyCache | None = None, timeout: float = 60.0, client=None, auto_apply: AutoApply | None = None):
        from memupdate.openai_endpoint import openai_client

        self.model, self.cache = model, cache
        # Not calibrated here (no endpoint runs on this machine): a stated confidence of 0.8 applies itself.
        self.auto_apply = auto_apply or AutoApply(update=0.8, rule_update=0.8, duplicate=0.8)
        self.name = f"openai:{model}"
        self.client = client or openai_client(base_url, api_key, timeout=timeout)
        self.unreadable = 0

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        keys = [self._key(a, b) for a, b in pairs]
        cached = self.cache.get_many(keys) if self.cache else {}
        verdicts = []
        for (first, second), key in zip(pairs, keys, strict=True):
            reply = cached.get(key)
            if reply is None:
                reply = self._ask(first, second)
                if self.cache and read_reply(reply, first, second) is not None:
                    self.cache.put(key, reply)
            verdict = read_reply(reply, first, second)
            if verdict is None:
                self.unreadable += 1
                verdict = Verdict("compatible", 0.0)
            verdicts.append(verdict)
        return verdicts

    def _ask(self, first: Statement, second: Statement) -> str:
        from memupdate.errors import MemupdateError
        from memupdate.openai_endpoint import EndpointRole, mapped_errors, status_detail

        role = EndpointRole("relation judge", "--judge-base-url", "--judge-api-key", "--judge")
        url = str(self.client.base_url).rstrip("/")
        with mapped_errors(role, url, MemupdateError, lambda exc: f"relation judge endpoint {url}: {status_detail(exc)}"):
            response = self.client.chat.completions.create(
                model=self.model, temperature=0.0, max_tokens=60,
                messages=[{"role": "user", "content": prompt_for(first, second)}],
                response_format={"type": "json_schema", "json_schema": {"name": "relation", "schema": SCHEMA}},
            )
        return response.choices[0].message.content or ""

    def _key(self, first: Statement, second: Statement) -> CacheKey:
        text = json.dumps([first.text, first.time, second.text, second.time])
        return CacheKey("judge", self.model, TEMPLATE_HASH, hashlib.sha256(text.encode()).hexdigest(), "relation")
