"""`--answerer hf:DIR`: a local checkpoint answers on the CPU with the endpoint answerer's prompt and cache.

The checkpoint is the tiny Qwen2 built from a config with a locally trained tokenizer
(conftest's `tiny_model`, built by `memupdate.rl.distill.tiny_student`): random weights, so the answers
are noise, but the prompt, the greedy batched generation and the cache are the real ones. No hub download.
"""

from __future__ import annotations

import os
import uuid

import pytest
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.scoring.answer_prompts import answer_prompt
from memupdate.scoring.answerer import make_answerer, make_reader
from memupdate.scoring.hf_reader import HFReader
from memupdate.scoring.llm_cache import LLMReplyCache
from memupdate.scoring.questions import QAItem
from memupdate.scoring.readers import AnswererUnavailable

QUESTIONS = [
    QAItem(0, "When did Nadia run her first 10k race?", "2 March 2024", None, (), 2),
    QAItem(1, "Which dog was adopted by Nadia?", "a dog named Biscuit", None, (), 4),
    QAItem(2, "Which hobbies does Owen have?", "sailing, chess", None, (), 1),
]
CONTEXTS = ["Nadia ran her first 10k race on 2 March 2024", "Nadia adopted a dog named Biscuit", "Owen likes sailing"]


@pytest.fixture(scope="module")
def checkpoint(tiny_model):
    return tiny_model


def recorded_generate(reader: HFReader) -> list:
    """Load the reader's model and record the input ids of each `generate` call."""
    model, _ = reader._loaded()
    calls, generate = [], model.generate

    def spy(**kwargs):
        calls.append(kwargs["input_ids"])
        return generate(**kwargs)

    model.generate = spy
    return calls


def test_checkpoint_answers_greedily_in_batches_with_the_same_prompt_and_cache(engine, checkpoint) -> None:
    answerer = make_answerer(f"hf:{checkpoint}", engine=engine)
    reader = answerer.answerer
    reader.batch_size = 2
    calls = recorded_generate(reader)
    answers = answerer.answer(QUESTIONS, CONTEXTS)
    assert len(answers) == 3 and all(isinstance(a, str) for a in answers)
    assert [len(ids) for ids in calls] == [2, 1], "3 prompts in batches of 2, one generate call a batch"
    tokenizer = reader._tokenizer
    seen = "\n".join(tokenizer.decode(ids, skip_special_tokens=True) for batch in calls for ids in batch)
    for question, context in zip(QUESTIONS, CONTEXTS, strict=True):
        assert answer_prompt(question, context).prompt in seen, "the endpoint answerer's prompt, as a user message"
    assert reader.requests == 3
    assert reader.cache_name.startswith(f"hf:{checkpoint.name}@")
    assert LLMReplyCache(engine).count("answer", reader.cache_name) == 3

    again = make_answerer(f"hf:{checkpoint}", engine=engine)
    assert again.answer(QUESTIONS, CONTEXTS) == answers
    assert again.answerer.requests == 0 and again.answerer._hf_model is None, "cached: the weights never load"
    uncached = make_answerer(f"hf:{checkpoint}").answer(QUESTIONS[:1], CONTEXTS[:1])
    assert uncached == answers[:1], "greedy: the same reply without the cache"


def test_a_changed_checkpoint_is_another_cache_key(checkpoint) -> None:
    reader = HFReader(checkpoint)
    before = reader.cache_name
    weights = next(checkpoint.glob("*.safetensors"))
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # written again in place
    assert HFReader(checkpoint).cache_name != before


def test_a_folder_without_a_checkpoint_is_one_line_before_any_work(tmp_path, monkeypatch) -> None:
    import memupdate.cli.evaluate as cli_evaluate

    def no_work(*_args, **_kwargs):
        raise AssertionError("the checkpoint is checked before any work")

    with pytest.raises(AnswererUnavailable, match=r"--judge hf:.*: no config.json in"):
        make_answerer(f"hf:{tmp_path}", judge=f"hf:{tmp_path}").judge_endpoint.check()
    monkeypatch.setattr(cli_evaluate, "load_conversations", no_work)
    monkeypatch.setattr(cli_evaluate, "open_store", no_work)
    runner = CliRunner()
    missing = tmp_path / "nothing"
    result = runner.invoke(app, ["eval", "--policy", "none", "--answerer", f"hf:{missing}"], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"--answerer hf:{missing}: checkpoint path" in line and "does not exist" in line
    result = runner.invoke(app, ["eval", "--policy", "none", "--answerer", f"hf:{missing}",
                                 "--answerer-base-url", "http://127.0.0.1:9/v1"], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "drop --answerer-base-url" in result.output


def test_reward_read_by_a_local_checkpoint(store, checkpoint) -> None:
    """`RewardConfig(qa="answerer", answerer_model="hf:DIR")`, as verl's reward kwargs pass it: a no-op
    scores exactly 0 (same context, the cached answer)."""
    from memupdate.scoring.reward import RewardConfig, compute_reward
    from memupdate.store import NewMemory

    metadata = {"dia_ids": ["D1:3"], "date": "2023-05-08"}
    store.create_many([NewMemory("Caroline went to a LGBTQ support group yesterday", key="f0000", metadata=metadata)])
    qa = QAItem(0, f"When did Caroline go to the group {uuid.uuid4().hex[:6]}?", "7 May 2023", None, ("D1:3",), 2)
    config = RewardConfig(qa="answerer", answerer_model=f"hf:{checkpoint}")
    noop = compute_reward(store, store.fork((*store.namespace, "noop-hf")), [qa], config)
    assert noop.reward == 0.0 and noop.qa_before == noop.qa_after


def test_a_packaged_model_name_reads_with_its_built_checkpoint(checkpoint, monkeypatch) -> None:
    """`hf:smollm2` is the packaged model's folder, as for `--policy hf --model smollm2` (the build is the
    slow test's job: here the name resolves to the tiny checkpoint)."""
    from memupdate.llm import models

    monkeypatch.setattr(models, "get_model", lambda name, **_: checkpoint if name == "smollm2" else None)
    assert make_reader("hf:smollm2").cache_name == HFReader(checkpoint).cache_name
