"""The LLM answerer and judge against the scripted OpenAI-compatible stand-in (`tests/openai_standin.py`,
127.0.0.1 only), with replies cached in the real test database.

No LLM can be downloaded here, so the stand-in plays both roles: as the answerer it reads the context
like a crude reader (the context line sharing most words with the question); as the judge it says
CORRECT when the gold answer's text is inside the generated one, Mem0-style (a sentence, then JSON).
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
from openai_standin import Failure, OpenAIStandIn
from sqlalchemy import inspect
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.migrations.schema import current_revision, downgrade, upgrade
from memupdate.scoring.answer_prompts import DATE_HINT, answer_prompt, chosen_answer, parse_judgement
from memupdate.scoring.answer_report import answerer_report, pearson
from memupdate.scoring.answerer import answerer_qa_scores, make_answerer
from memupdate.scoring.llm_cache import LLMReplyCache
from memupdate.scoring.metrics import bleu1, locomo_f1
from memupdate.scoring.readers import AnswererError, AnswererUnavailable, ChatEndpoint
from memupdate.store.database import get_engine

runner = CliRunner()


@dataclass(frozen=True)
class Q:
    question: str
    answer: str | None
    category: int
    adversarial_answer: str | None = None


QUESTIONS = [
    Q("When did Nadia run her first 10k race?", "2 March 2024", 2),
    Q("Which dog was adopted by Nadia?", "a dog named Biscuit", 4),
    Q("Which hobbies does Owen have?", "sailing, chess", 1),
    Q("What is Owen's favourite opera?", None, 5, adversarial_answer="Tosca"),
]
CONTEXT_BEFORE = "Owen sails with his dad\nNadia adopted a dog named Biscuit"
CONTEXT_AFTER = "Nadia ran her first 10k race on 2 March 2024\nNadia adopted a dog named Biscuit\nOwen likes sailing and chess"


def reader(body: dict) -> str:
    """Answerer: the context line sharing most words with the question; judge: Mem0-style verdict."""
    prompt = body["messages"][0]["content"]
    if "Gold answer:" in prompt:
        gold = re.findall(r"Gold answer: (.*)", prompt)[-1].lower()  # the last: the first is the prompt's example
        generated = re.findall(r"Generated answer: (.*)", prompt)[-1].lower()
        label = "CORRECT" if gold in generated else "WRONG"
        return f'The generated answer {"matches" if label == "CORRECT" else "misses"} the gold one. {{"label": "{label}"}}'
    context, _, rest = prompt.partition("\n\nBased on the context above")
    question = set(re.findall(r"\w+", rest.split("Question: ", 1)[1].lower()))
    if "(a)" in rest:  # category 5: the refusal is always right in this conversation
        return "a" if "(a) Not mentioned" in rest else "b"
    return max(context.split("\n"), key=lambda line: len(question & set(re.findall(r"\w+", line.lower()))))


@pytest.fixture
def standin():
    with OpenAIStandIn(reader, models=("reader", "judge")) as server:
        yield server


def completions(server: OpenAIStandIn) -> int:
    return len(server.requests)


def test_prompts_follow_locomo() -> None:
    temporal = answer_prompt(QUESTIONS[0], "ctx line")
    assert temporal.prompt.startswith("ctx line\n\nBased on the context above")
    assert temporal.prompt.endswith(f"Question: {QUESTIONS[0].question}{DATE_HINT} Short answer:")
    plain = answer_prompt(QUESTIONS[1], "ctx line")
    assert DATE_HINT not in plain.prompt and plain.prompt.endswith("Question: Which dog was adopted by Nadia? Short answer:")
    adversarial = answer_prompt(QUESTIONS[3], "ctx line")
    assert set(adversarial.choices.values()) == {"Not mentioned in the conversation", "Tosca"}
    assert adversarial == answer_prompt(QUESTIONS[3], "ctx line"), "the choice order is fixed per question"
    refusal = next(k for k, v in adversarial.choices.items() if v.startswith("Not mentioned"))
    assert chosen_answer(refusal, adversarial.choices) == "Not mentioned in the conversation"
    assert chosen_answer(f"({refusal})", adversarial.choices) == "Not mentioned in the conversation"
    assert chosen_answer("Tosca, I think", adversarial.choices) == "Tosca, I think"


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ('It names the same date. {"label": "CORRECT"}', True),
        ('Different topic. {"label": "WRONG"}', False),
        ("```json\n{\n  \"label\" : \"correct\"\n}\n```", True),
        ("The answer is not correct in any way.\nWRONG", False),
        ("Same month and year, so CORRECT", True),
        ("I cannot tell.", None),
    ],
)
def test_judge_replies_parse(reply: str, verdict: bool | None) -> None:
    assert parse_judgement(reply) is verdict


def test_answers_are_cached_and_a_rerun_asks_nothing(engine, standin) -> None:
    model = f"reader-{uuid.uuid4().hex[:6]}"  # a model name of its own: the cache table is shared by tests
    standin.models = (model,)
    contexts = [CONTEXT_AFTER] * len(QUESTIONS)
    first = make_answerer(model, standin.base_url, engine=engine)
    answers = first.answer(QUESTIONS, contexts)
    assert completions(standin) == len(QUESTIONS) and first.answerer.requests == len(QUESTIONS)
    assert answers[:3] == [
        "Nadia ran her first 10k race on 2 March 2024",
        "Nadia adopted a dog named Biscuit",
        "Owen likes sailing and chess",
    ]
    assert answers[3] == "Not mentioned in the conversation"
    assert standin.requests[0]["temperature"] == 0.0 and standin.requests[0]["model"] == model
    assert LLMReplyCache(engine).count("answer", model) == len(QUESTIONS)

    again = make_answerer(model, standin.base_url, engine=engine)  # a new process would see the same
    assert again.answer(QUESTIONS, contexts) == answers
    assert completions(standin) == len(QUESTIONS) and again.answerer.requests == 0
    assert answerer_qa_scores(again, QUESTIONS, contexts) == [
        locomo_f1(a, q.answer, q.category) for a, q in zip(answers, QUESTIONS, strict=True)
    ]

    changed = again.answer(QUESTIONS[:1], [CONTEXT_BEFORE])  # another context is another key
    assert completions(standin) == len(QUESTIONS) + 1 and changed == ["Owen sails with his dad"]
    duplicates = make_answerer(f"{model}-x", standin.base_url).answer(QUESTIONS[:1] * 3, [CONTEXT_AFTER] * 3)
    assert len(set(duplicates)) == 1 and completions(standin) == len(QUESTIONS) + 2, "one request per distinct prompt"


def test_a_run_that_dies_keeps_its_answers(engine) -> None:
    model = f"flaky-{uuid.uuid4().hex[:6]}"
    failing = {"Which hobbies does Owen have?"}

    def flaky(body: dict) -> str | int:
        prompt = body["messages"][0]["content"]
        return 503 if any(q in prompt for q in failing) else reader(body)

    with OpenAIStandIn(flaky, models=(model,)) as server:
        answerer = make_answerer(model, server.base_url, engine=engine, retries=1, concurrency=1)
        with pytest.raises(AnswererError, match=r"answered HTTP 503 for model"):
            answerer.answer(QUESTIONS, [CONTEXT_AFTER] * len(QUESTIONS))
        tried = [r["messages"][0]["content"] for r in server.requests]
        assert sum("Which hobbies" in t for t in tried) == 2, "one retry, then the run stops"
        answered = len(tried) - 2  # the queue after the failure is cancelled (one may already be running)
        assert answered >= 2 and LLMReplyCache(engine).count("answer", model) == answered
        failing.clear()
        make_answerer(model, server.base_url, engine=engine).answer(QUESTIONS, [CONTEXT_AFTER] * len(QUESTIONS))
        assert len(server.requests) - len(tried) == len(QUESTIONS) - answered, "the rerun asks only what is missing"


def test_busy_endpoint_is_retried_after_its_retry_after(monkeypatch) -> None:
    """429 and 503 with Retry-After: 1 are retried once each, a second later (the SDK's own backoff
    would wait at most 0.5 s before a first retry); a blank OPENAI_API_KEY is sent as EMPTY."""
    replies = iter([Failure.retry_after(429, "1"), "Berlin", Failure.retry_after(503, "1"), "Paris"])
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with OpenAIStandIn(lambda _body: next(replies), models=("m",)) as server:
        endpoint = ChatEndpoint("m", server.base_url, retries=1)
        assert endpoint.complete("Where does Ann live?", 8) == "Berlin"
        assert endpoint.complete("Where does Bob live?", 8) == "Paris"
    assert len(server.requests) == 4 and endpoint.requests == 2
    gaps = [server.times[1] - server.times[0], server.times[3] - server.times[2]]
    assert min(gaps) >= 0.95, f"retries waited {gaps} s, not the 1 s the server asked for"
    assert {h["authorization"] for h in server.headers} == {"Bearer EMPTY"}


def test_retries_run_out_with_one_line_naming_the_status() -> None:
    with OpenAIStandIn(lambda _body: Failure(429, "slow down", {"Retry-After-Ms": "10"}), models=("m",)) as server:
        expected = r"^answerer endpoint .* answered HTTP 429 for model 'm' \(slow down\); answers so far are cached"
        with pytest.raises(AnswererError, match=expected):
            ChatEndpoint("m", server.base_url, retries=2).complete("Where?", 8)
    assert len(server.requests) == 3, "the first try and 2 retries"


def test_judge_labels_and_skips_adversarial(engine, standin) -> None:
    answerer = make_answerer("reader", standin.base_url, judge="judge", engine=engine)
    predictions = ["on 2 March 2024", "a cat", "sailing, chess", "Not mentioned in the conversation"]
    assert answerer.judge(QUESTIONS, predictions) == [True, False, True, None]
    judged = [r for r in standin.requests if "Gold answer:" in r["messages"][0]["content"]]
    assert len(judged) == 3 and all(r["model"] == "judge" for r in judged)
    assert make_answerer("reader", standin.base_url, judge="judge", engine=engine).judge(QUESTIONS, predictions)[0]
    assert len(standin.requests) == 3, "judgements are cached too"
    with pytest.raises(AnswererError, match="--judge MODEL"):
        make_answerer("reader", standin.base_url).judge(QUESTIONS, predictions)


def test_report_has_metrics_per_category_and_the_correlation(engine, standin) -> None:
    model = f"reader-{uuid.uuid4().hex[:6]}"
    standin.models = (model, "judge")
    answerer = make_answerer(model, standin.base_url, judge="judge", engine=engine)
    contexts = {"before": [CONTEXT_BEFORE] * 4, "after": [CONTEXT_AFTER] * 4}
    proxy = {"before": [0.0, 1.0, 0.2, 0.0], "after": [1.0, 1.0, 0.9, 0.0]}
    seen: list[tuple[int, int]] = []
    section, rows = answerer_report(answerer, QUESTIONS, contexts, proxy, progress=lambda d, t: seen.append((d, t)))

    assert section["model"] == model and section["judge"] == "judge"
    assert seen[-1][0] == seen[-1][1] == 2 * (4 + 3), "answers and (non-adversarial) judgements, both sides"
    after = section["after"]
    f1s = [locomo_f1(r["after"]["answer"], q.answer, q.category) for r, q in zip(rows, QUESTIONS, strict=True)]
    assert [r["after"]["f1"] for r in rows] == f1s and f1s[3] == 1.0
    assert after["f1"] == pytest.approx(np.mean(f1s))
    assert after["bleu1"] == pytest.approx(np.mean([bleu1(r["after"]["answer"], q.answer or "Not mentioned in the conversation")
                                                    for r, q in zip(rows, QUESTIONS, strict=True)]))
    assert after["by_category"]["temporal"]["f1"] == pytest.approx(f1s[0]) and f1s[0] > 0.4
    assert after["by_category"]["multi-hop"]["judge_accuracy"] == 0.0, "'Owen likes sailing and chess' lacks 'sailing, chess'"
    assert after["judge_accuracy"] == pytest.approx(2 / 3) and after["judged"] == 3
    assert after["by_category"]["adversarial"]["judge_accuracy"] is None
    assert section["before"]["by_category"]["temporal"]["f1"] == 0.0, "the race is not in the context before"
    assert rows[1]["before"]["judge"] is True and rows[0]["before"]["judge"] is False

    before_f1 = [r["before"]["f1"] for r in rows]
    r = section["proxy_f1_pearson"]
    assert r["after"] == pytest.approx(np.corrcoef(proxy["after"], f1s)[0, 1])
    assert r["before"] == pytest.approx(np.corrcoef(proxy["before"], before_f1)[0, 1])
    both = np.corrcoef(proxy["before"] + proxy["after"], before_f1 + f1s)[0, 1]
    assert r["all"] == pytest.approx(both)
    assert pearson([1, 1, 1], [0, 1, 2]) is None and pearson([1], [2]) is None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_dead_endpoint_fails_fast_with_one_line(monkeypatch) -> None:
    import memupdate.cli.evaluate as cli_evaluate

    def no_work(*_args, **_kwargs):
        raise AssertionError("the endpoint is checked before any work")

    monkeypatch.setattr(cli_evaluate, "load_conversations", no_work)
    monkeypatch.setattr(cli_evaluate, "open_store", no_work)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    args = ["eval", "--policy", "none", "--answerer", "m", "--answerer-base-url", url]
    result = runner.invoke(app, args, env={"COLUMNS": "400"})  # a wide terminal: rich wraps at 80 columns
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"answerer endpoint {url} does not answer" in lines[0]
    assert "--answerer-base-url" in lines[0] and "Traceback" not in result.output


def test_unserved_model_is_named(standin) -> None:
    with pytest.raises(AnswererUnavailable, match=r"answerer model 'gpt-x' is not served at .* \(it serves reader, judge\)"):
        make_answerer("gpt-x", standin.base_url).check()
    with pytest.raises(AnswererUnavailable, match=r"judge model 'nobody' is not served"):
        make_answerer("reader", standin.base_url, judge="nobody").check()
    make_answerer("reader", standin.base_url, judge="judge").check()
    assert standin.requests == [], "the check asks for no completion"


def test_migration_0002_up_and_down(fresh_database) -> None:
    engine = get_engine(fresh_database)
    upgrade(engine, "0001")
    assert "llm_replies" not in inspect(engine).get_table_names()
    upgrade(engine, "0002")
    assert current_revision(engine) == "0002" and "llm_replies" in inspect(engine).get_table_names()
    columns = {c["name"] for c in inspect(engine).get_columns("llm_replies")}
    assert {"kind", "model", "template_hash", "input_hash", "question", "reply"} <= columns
    downgrade(engine)
    assert current_revision(engine) == "0001"
    tables = inspect(engine).get_table_names()
    assert "llm_replies" not in tables and "memories" in tables


def test_eval_cli_reports_the_answerer_and_a_rerun_asks_nothing(database_url, standin, tmp_path) -> None:
    """`memupdate eval --answerer --judge` on the shipped sample, real database and embedder; the stand-in
    reads the proxy's context. No policy (fast): after = before, so the after side is all cache hits,
    and the second run is answered from the cache entirely."""
    from memupdate.rl.data.locomo import sample_conversation_path

    model = f"reader-{uuid.uuid4().hex[:6]}"
    standin.models = (model, "judge")
    out = tmp_path / "report.json"
    args = ["eval", "--locomo", str(sample_conversation_path()), "--policy", "none", "--max-questions", "4",
            "--url", database_url, "--answerer", model, "--answerer-base-url", standin.base_url,
            "--judge", "judge", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"answerer {model}, judge judge" in result.output and "Pearson r" in result.output
    section = json.loads(out.read_text())["answerer"]
    assert section["before"]["questions"] == section["after"]["questions"] == 4
    for side in ("before", "after"):
        assert set(section[side]) >= {"f1", "bleu1", "judge_accuracy", "by_category"}
        assert set(section[side]["by_category"]) == {"temporal"}, "the sample's first 4 questions are temporal"
    assert set(section["proxy_f1_pearson"]) == {"before", "after", "all"}
    prompts = [r["messages"][0]["content"] for r in standin.requests if r["model"] == model]
    assert prompts and all(p.endswith(f"{DATE_HINT} Short answer:") for p in prompts)
    asked = len(standin.requests)
    assert section["requests"] == asked == 4 + 4, "4 answers and 4 judgements; the identical after side is cached"
    assert section["after"] == section["before"]

    again = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert len(standin.requests) == asked, "every answer and judgement came from the cache"
    assert json.loads(out.read_text())["answerer"]["after"] == section["after"]


def test_reward_read_by_a_frozen_answerer(store, standin) -> None:
    """`RewardConfig(qa="answerer")`: the reward's QA term is the answerer's LoCoMo F1 on the same
    context; a no-op still scores exactly 0 (same context, cached answer) and adding the answer gains."""
    from memupdate.scoring.questions import QAItem
    from memupdate.scoring.reward import RewardConfig, compute_reward
    from memupdate.store import NewMemory

    store.create_many([
        NewMemory("Caroline went to a LGBTQ support group yesterday", key="f0000",
                  metadata={"dia_ids": ["D1:3"], "date": "2023-05-08"}),
        NewMemory("Melanie painted a lake sunrise last year", key="f0001", metadata={"date": "2023-05-08"}),
    ])
    qa = QAItem(0, "When did Caroline go to the LGBTQ support group?", "7 May 2023", None, ("D1:3",), 2)
    config = RewardConfig(qa="answerer", answerer_model="reader", answerer_base_url=standin.base_url)
    noop = compute_reward(store, store.fork((*store.namespace, "traj", "noop")), [qa], config)
    assert noop.reward == 0.0
    fork = store.fork((*store.namespace, "traj", "anchored"))
    fork.update("f0000", content="Caroline went to a LGBTQ support group yesterday (7 May 2023)")
    helped = compute_reward(store, fork, [qa], config)
    assert helped.qa_after > helped.qa_before and helped.reward > 0
    with pytest.raises(ValueError, match="answerer_model"):
        RewardConfig(qa="answerer")
    assert RewardConfig.from_kwargs({"qa": "answerer", "answerer_model": "m", "context_tokens": "90"}).context_tokens == 90
