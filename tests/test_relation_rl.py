"""The relation task: each decision's reward read from a real bank's fork, GRPO over sampled verdicts moving
a tiny judge toward the decision the reward pays for, and its stages in a learning run's folder (a finished
run is read back, not redone; `rl learn --task relation` and `judge learn` build the same config)."""

from __future__ import annotations

import json

import pytest

from memupdate.judge.pairs import LabelledPair
from memupdate.judge.verdict import RELATIONS
from memupdate.rl.data.relation_rewards import RewardRow
from memupdate.rl.data.relation_units import Probe, RelationBank, letta_relation_banks, statement_memories
from memupdate.rl.distill.config import LearnConfig, RelationConfig
from memupdate.rl.distill.relation import RewardedPair, grpo, reward_table


def profile_bank() -> RelationBank:
    """A Jenverse-like profile: the city changed; the editor and the pet are both true."""
    said = {"Based in New York City": "2024-01-01", "Uses VS Code": "2024-01-01", "Has a dog named Rex": "2024-01-01",
            "Moved from NYC to San Francisco": "2024-01-04", "Also has a cat named Luna": "2024-01-04"}
    memories, keys = statement_memories(said)
    evidence = tuple(keys.values())
    probes = [Probe("Where am I based now?", "San Francisco", evidence), Probe("Where am I based now?", "New York City", evidence, sign=-1.0),
              Probe("What is my dog called?", "Rex", evidence)]
    pairs = [LabelledPair("Based in New York City", "Moved from NYC to San Francisco", "", "2024-01-01", "2024-01-04", group="p"),
             LabelledPair("Has a dog named Rex", "Also has a cat named Luna", "", "2024-01-01", "2024-01-04", group="p")]
    return RelationBank("p", "train", probes, pairs, memories)


def test_each_decision_is_rewarded_by_what_it_does_to_the_answers(store, tmp_path) -> None:
    path = tmp_path / "rewards.jsonl"
    table = reward_table(store, [profile_bank()], path)
    city, pets = (table[json.dumps(["p", p.first, p.second])] for p in profile_bank().pairs)
    # Retiring New York for San Francisco removes the wrong answer; keeping both changes nothing.
    assert city.keep == 0.0 and city.update > 0.1
    # Retiring the dog for the cat loses a right answer: the decision that harms costs.
    assert pets.update < -0.1 and pets.reward("compatible") == 0.0 > pets.reward("update")
    assert city.informative and pets.informative
    assert all(s.count() == 0 for s in [store.scoped((*store.namespace, "relation-rl", "p"))])  # the bank is dropped after
    # A rerun reads the table back, computing nothing (a run resumes).
    lines = path.read_text().splitlines()
    again = reward_table(store, [profile_bank()], path)
    assert again == table and path.read_text().splitlines() == lines


def test_a_letta_row_is_a_bank_whose_question_reads_the_change(store, tmp_path, embedder) -> None:
    """A Letta row's question credits the answer after the change and counts its stale answer (the one name
    the replaced fact holds that neither the question nor the answer does) against: superseding the
    replaced fact by the contradicting one earns; keeping both does not."""
    row = {"facts": ["Nora Fishel and Eliza Woodley collaborated on a charity event that combined music and literature.",
                     "Joren Sullivar is a marine biologist specializing in coral reef restoration.",
                     "Eliza Woodley is a published author known for her historical fiction novels."],
           "supporting_fact_indices": [0],
           "contradicting_fact": "Joren Sullivar and Eliza Woodley collaborated on a charity event that combined music and literature.",
           "question": "Which person collaborated with Eliza Woodley on a charity event that combined music and literature?",
           "answer": "Joren Sullivar", "contradicting_answer": "Joren Sullivar"}
    [bank] = letta_relation_banks([row], embedder.embed)
    assert [(p.answer, p.sign) for p in bank.probes] == [("Joren Sullivar", 1.0), ("Nora Fishel", -1.0)]
    [change] = [p for p in bank.pairs if p.label == "update"]
    assert (change.first, change.second) == (row["facts"][0], row["contradicting_fact"])
    bank.part = "train"
    rewards = reward_table(store, [bank], tmp_path / "rewards.jsonl")[json.dumps([bank.group, change.first, change.second])]
    assert rewards.update > 0 == rewards.keep


def tiny_judge(tmp_path):
    """A two-layer BERT pair classifier over RELATIONS with the packaged MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from memupdate.judge.local import CARD, base_model_path

    tokenizer = AutoTokenizer.from_pretrained(base_model_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=len(RELATIONS), id2label=dict(enumerate(RELATIONS)),
                        label2id={r: i for i, r in enumerate(RELATIONS)})
    folder = tmp_path / "sft"
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / CARD).write_text(json.dumps({"labels": list(RELATIONS), "temperature": 1.0, "auto_apply": {"update": 0.8}, "recipe": {"target_precision": 0.9}}))
    return folder


def test_grpo_moves_the_judge_toward_the_rewarded_decision_and_drops_equal_groups(tmp_path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification

    sft = tiny_judge(tmp_path)
    # Updates pay on the first kind of pair, harm on the second; the third earns the same whatever is done.
    changed = [LabelledPair(f"Sam lives in {a}", f"Sam moved to {b} last month", "", "2024-01-01", "2024-02-01")
               for a, b in (("Paris", "Berlin"), ("Leeds", "Oslo"), ("Rome", "Lima"))]  # what the rule cannot read
    both = [LabelledPair(f"Sam has a {a}", f"Sam also has a {b}", "", "2024-01-01", "2024-02-01") for a, b in (("dog", "cat"), ("bike", "car"))]
    def rewarded(pair: LabelledPair, update: float, duplicate: float) -> RewardedPair:
        return RewardedPair(pair, RewardRow(pair.first, "g", "train", "", "", 0.0, 1, update, duplicate))

    rows = ([rewarded(p, 0.5, 0.0) for p in changed] + [rewarded(p, -0.5, -0.5) for p in both]
            + [rewarded(LabelledPair("x y z", "x y w", ""), 0.0, 0.0)])

    def p_update(folder) -> list[float]:
        from transformers import AutoTokenizer

        from memupdate.judge.train import encode_pairs

        model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        with torch.inference_mode():
            logits = model(**encode_pairs(AutoTokenizer.from_pretrained(folder), changed + both)).logits
        return torch.softmax(logits, -1)[:, RELATIONS.index("update")].tolist()

    before = p_update(sft)
    config = RelationConfig(grpo_learning_rate=3e-3, steps=40, batch=4, group=8, kl=0.0, eval_every=10)
    paying = [r for r in rows if r.row.update >= 0]  # the changed pairs and the one that teaches nothing
    result = grpo(str(sft), paying, paying, [], config, 0, tmp_path / "rl")
    assert all(a > b + 0.1 for a, b in zip(p_update(result["checkpoint"])[:3], before[:3], strict=True))
    assert result["pool"] == 3  # the unit whose decisions all earn the same is never drawn
    assert result["chosen_step"] > 0 and result["curve"][-1]["recipe_reward"] > result["curve"][0]["recipe_reward"]
    harming = [r for r in rows if r.row.update < 0]
    result = grpo(str(sft), harming, harming, [], config, 0, tmp_path / "rl-harm")
    assert all(a < b for a, b in zip(p_update(result["checkpoint"])[3:], before[3:], strict=True))
    assert (tmp_path / "rl" / "relation-judge.safetensors").is_file() and result["dropped_groups"] >= 0


class FirstLineReader:
    """A scripted reader that answers with the last word of the context's first (earliest) line."""

    def __init__(self):
        self.prompts: list[str] = []

    def complete_batch(self, prompts: list[str], max_tokens: int) -> list[str]:
        self.prompts += prompts
        return [p.splitlines()[0].split()[-1] for p in prompts]


def test_the_reader_rewards_what_the_proxy_cannot_see(tmp_path, embedder) -> None:
    from memupdate.rl.distill.relation import reader_rewards

    said = {"I live in Paris with my sister": "2024-01-05", "I moved to Berlin": "2024-06-01"}
    memories, _ = statement_memories(said)
    pair = LabelledPair(*said, "", *said.values(), source="longmemeval-knowledge-update", group="q")
    bank = RelationBank("q", "train", [Probe("Where do I live now?", "Berlin")], [pair], memories)
    key = json.dumps(["q", pair.first, pair.second])
    proxy = {key: RewardRow(key, "q", "train", "", pair.source, 0.0, 1, 0.0, 0.0)}  # both in context: the proxy credits the answer
    reader = FirstLineReader()
    rows = reader_rewards([bank], proxy, reader, tmp_path / "reader.jsonl", embedder.embed)
    assert rows[key].update == 1.0 and rows[key].keep == 0.0 and rows[key].reward_by == "reader"
    assert rows[key].duplicate == 0.0  # a merge keeps the fuller words, Paris's: the stale answer stays
    asked = len(reader.prompts)
    assert reader_rewards([bank], proxy, reader, tmp_path / "reader.jsonl", embedder.embed) == rows and len(reader.prompts) == asked


# -- the run: a learning run's folder, the one command ------------------------------------------------

FINISHED = {  # a finished run's stages.json as the relation task wrote it before the one pipeline (no "load")
    "sft": {"result": "/models/judge-v2", "seconds": 0.0},
    "rewards": {"result": {"train": {"units": 3, "informative": 2, "best_decision_reward": 0.2, "by_source": {"jenverse": 2}},
                           "recipe": {"units": 1, "informative": 1, "best_decision_reward": 0.1, "by_source": {"jenverse": 1}}},
                "seconds": 0.0},
    "rl": {"result": {"curve": [{"step": 0, "recipe_reward": -0.01, "train_reward": -0.02},
                                {"step": 10, "recipe_reward": 0.001, "train_reward": 0.005, "kl": 1.2, "mean_sampled_reward": 0.1,
                                 "dropped": 5, "drawn": 9, "seconds": 3.0}],
                      "chosen_step": 10, "dropped_groups": 5, "drawn_groups": 9, "pool": 2, "checkpoint": "runs/relation-v2/rl", "card": {}},
           "seconds": 350.5},
}


@pytest.fixture
def finished_run(tmp_path, monkeypatch):
    """A relation run folder whose every stage is done, and a data folder; any stage's work fails the test."""
    import memupdate.rl.distill.relation as relation

    def never(*args, **kwargs):
        raise AssertionError("a finished stage was computed again")

    for name in ("banks_of", "sft_judge", "reward_table", "grpo_stage"):
        monkeypatch.setattr(relation, name, never)
    out, data = tmp_path / "run", tmp_path / "data"
    out.mkdir()
    data.mkdir()
    (out / "stages.json").write_text(json.dumps(FINISHED, indent=1))
    return out, data


def test_a_finished_relation_run_is_read_back_and_reported_not_redone(finished_run) -> None:
    import torch

    from memupdate.rl.distill.learn import RunInputs, learn
    from memupdate.rl.distill.relation import run_config

    out, data = finished_run
    before = (out / "stages.json").read_text()
    config = LearnConfig(task="relation", threads=torch.get_num_threads(), relation=RelationConfig(locomo_units=7))
    metrics = learn(None, config, out, RunInputs(data=data))
    assert (out / "stages.json").read_text() == before
    assert metrics == json.loads((out / "metrics.json").read_text()) and (out / "learning_curve.png").stat().st_size > 0
    assert metrics["task"] == "relation" and metrics["rl"] == FINISHED["rl"]["result"] and metrics["final_checkpoint"] == "runs/relation-v2/rl"
    assert metrics["stages"] == {"sft": {"seconds": 0.0, "load": None}, "rewards": {"seconds": 0.0, "load": None},
                                 "rl": {"seconds": 350.5, "load": None}}
    saved = run_config(out)  # what `data preprocess --task relation` reads to give the run's units again
    assert (saved.seed, saved.relation) == (config.seed, config.relation)


def test_rl_learn_task_relation_and_judge_learn_are_one_command(finished_run, monkeypatch) -> None:
    import torch
    from typer.testing import CliRunner

    import memupdate.cli.learn as command
    from memupdate.cli import app

    out, data = finished_run
    monkeypatch.setattr(command, "open_store", lambda url: None)
    threads = str(torch.get_num_threads())
    long = CliRunner().invoke(app, ["rl", "learn", "--task", "relation", "--data", str(data), "--out", str(out), "--threads", threads])
    short = CliRunner().invoke(app, ["judge", "learn", "--data", str(data), "--out", str(out), "--threads", threads])
    assert long.exit_code == short.exit_code == 0, long.output + short.output
    assert long.output == short.output and "chosen step 10 (0: the SFT judge)" in long.output
    assert "step 10: recipe reward +0.00100, train +0.00500, kl 1.2, dropped 5/9" in long.output


def test_judge_learn_takes_rl_learns_relation_options_and_builds_the_same_config(monkeypatch, tmp_path) -> None:
    from dataclasses import fields

    import typer
    from typer.testing import CliRunner

    import memupdate.cli.learn as command
    import memupdate.rl.distill.learn as pipeline
    from memupdate.cli import app
    from memupdate.rl.distill.task import RunInputs

    commands = typer.main.get_command(app).commands
    long = {p.name: p for p in commands["rl"].commands["learn"].params}
    short = {p.name: p for p in commands["judge"].commands["learn"].params}
    section = {f.name for f in fields(RelationConfig)}
    assert {"locomo_units", "fc_units"} <= section and set(short) == {"data", "out", "url", "ship", "seed", "threads"} | section
    for name, param in short.items():  # the same option: flags, default, help
        assert (param.opts, param.default, param.help) == (long[name].opts, long[name].default, long[name].help), name

    given = []
    monkeypatch.setattr(command, "open_store", lambda url: None)
    monkeypatch.setattr(command, "_print_relation_summary", lambda metrics, out: None)
    monkeypatch.setattr(pipeline, "learn", lambda store, config, out, inputs, progress: given.append((config, inputs)) or {})
    options = ["--data", str(tmp_path), "--out", str(tmp_path / "run"), "--seed", "7", "--threads", "1", "--sft-from", "x",
               "--grpo-learning-rate", "1e-4", "--steps", "5", "--locomo-units", "3", "--fc-units", "4", "--reader", "hf:r"]
    for argv in (["rl", "learn", "--task", "relation", *options], ["judge", "learn", *options]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 0, result.output
    relation = RelationConfig(sft_from="x", grpo_learning_rate=1e-4, steps=5, locomo_units=3, fc_units=4, reader="hf:r")
    expected = (LearnConfig(task="relation", seed=7, threads=1, relation=relation), RunInputs(data=tmp_path))
    assert given == [expected, expected]


@pytest.mark.parametrize(("argv", "said"), [
    (["--task", "relation", "--train-conversations", "conv-26"], "the relation task reads --data, not conversations"),
    (["--ship", "--train-conversations", "conv-26", "--eval-conversations", "conv-47"], "it belongs to --task relation"),
    ([], "--task compaction needs --train-conversations and --eval-conversations"),
    (["--task", "nope", "--train-conversations", "conv-26", "--eval-conversations", "conv-47"], "choose compaction, targeted, relation"),
])
def test_rl_learn_names_what_a_task_reads(argv, said, monkeypatch, tmp_path) -> None:
    from typer.testing import CliRunner

    import memupdate.cli.learn as command
    from memupdate.cli import app

    monkeypatch.setattr(command, "load_conversations", lambda locomo, ids: [])
    monkeypatch.setattr(command, "open_store", lambda url: None)
    result = CliRunner().invoke(app, ["rl", "learn", "--out", str(tmp_path / "run"), *argv])
    assert result.exit_code != 0 and said in " ".join(result.output.split()), result.output
