"""The relation task: each decision's reward read from a real bank's fork, and GRPO over sampled verdicts
moving a tiny judge toward the decision the reward pays for."""

from __future__ import annotations

import json

import pytest

from memupdate.errors import MemupdateError
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.verdict import RELATIONS
from memupdate.rl.distill.relation import (
    Probe,
    RelationBank,
    RelationConfig,
    _statement_memories,
    grpo,
    informative,
    reward_of,
    reward_table,
)


def profile_bank() -> RelationBank:
    """A Jenverse-like profile: the city changed; the editor and the pet are both true."""
    said = {"Based in New York City": "2024-01-01", "Uses VS Code": "2024-01-01", "Has a dog named Rex": "2024-01-01",
            "Moved from NYC to San Francisco": "2024-01-04", "Also has a cat named Luna": "2024-01-04"}
    memories, keys = _statement_memories(said)
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
    assert city["keep"] == 0.0 and city["update"] > 0.1
    # Retiring the dog for the cat loses a right answer: the decision that harms costs.
    assert pets["update"] < -0.1 and reward_of(pets, "compatible") == 0.0 > reward_of(pets, "update")
    assert informative(city) and informative(pets)
    assert all(s.count() == 0 for s in [store.scoped((*store.namespace, "relation-rl", "p"))])  # the bank is dropped after
    # A rerun reads the table back, computing nothing (a run resumes).
    lines = path.read_text().splitlines()
    again = reward_table(store, [profile_bank()], path)
    assert again == table and path.read_text().splitlines() == lines


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
    rows = ([{"pair": p, "part": "train", "keep": 0.0, "update": 0.5, "duplicate": 0.0} for p in changed]
            + [{"pair": p, "part": "train", "keep": 0.0, "update": -0.5, "duplicate": -0.5} for p in both]
            + [{"pair": LabelledPair("x y z", "x y w", ""), "part": "train", "keep": 0.0, "update": 0.0, "duplicate": 0.0}])

    def p_update(folder) -> list[float]:
        from transformers import AutoTokenizer

        from memupdate.judge.train import encode_pairs

        model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        with torch.inference_mode():
            logits = model(**encode_pairs(AutoTokenizer.from_pretrained(folder), changed + both)).logits
        return torch.softmax(logits, -1)[:, RELATIONS.index("update")].tolist()

    before = p_update(sft)
    config = RelationConfig(learning_rate=3e-3, steps=40, batch=4, group=8, kl=0.0, eval_every=10, threads=1)
    paying = [r for r in rows if r["update"] >= 0]  # the changed pairs and the one that teaches nothing
    result = grpo(str(sft), paying, paying, [], config, tmp_path / "rl", log=lambda line: None)
    assert all(a > b + 0.1 for a, b in zip(p_update(result["checkpoint"])[:3], before[:3], strict=True))
    assert result["pool"] == 3  # the unit whose decisions all earn the same is never drawn
    assert result["chosen_step"] > 0 and result["curve"][-1]["recipe_reward"] > result["curve"][0]["recipe_reward"]
    harming = [r for r in rows if r["update"] < 0]
    result = grpo(str(sft), harming, harming, [], config, tmp_path / "rl-harm", log=lambda line: None)
    assert all(a < b for a, b in zip(p_update(result["checkpoint"])[3:], before[3:], strict=True))
    assert (tmp_path / "rl" / "relation-judge.safetensors").is_file() and result["dropped_groups"] >= 0


def test_rl_learn_names_the_command_that_trains_the_relation_judge(store) -> None:
    from memupdate.rl.distill.config import LearnConfig
    from memupdate.rl.distill.learn import make_task

    with pytest.raises(MemupdateError, match="memupdate judge learn"):
        make_task(LearnConfig(task="relation"), store)


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
    memories, _ = _statement_memories(said)
    pair = LabelledPair(*said, "", *said.values(), source="longmemeval-knowledge-update", group="q")
    bank = RelationBank("q", "train", [Probe("Where do I live now?", "Berlin")], [pair], memories)
    key = json.dumps(["q", pair.first, pair.second])
    proxy = {key: {"key": key, "keep": 0.0, "update": 0.0, "duplicate": 0.0}}  # both in context: the proxy credits the answer
    reader = FirstLineReader()
    rows = reader_rewards([bank], proxy, reader, tmp_path / "reader.jsonl", embedder.embed)
    assert rows[key]["update"] == 1.0 and rows[key]["keep"] == 0.0 and rows[key]["reward_by"] == "reader"
    assert rows[key]["duplicate"] == 0.0  # a merge keeps the fuller words, Paris's: the stale answer stays
    asked = len(reader.prompts)
    assert reader_rewards([bank], proxy, reader, tmp_path / "reader.jsonl", embedder.embed) == rows and len(reader.prompts) == asked
