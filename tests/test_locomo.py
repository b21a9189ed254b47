"""LoCoMo loader: the shipped sample, the shared development file (skipped where absent) and bad inputs."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from locomo_fixtures import locomo_dev_file_fixture, locomo_dev_path  # noqa: F401  (fixture `locomo_dev_file`)

import memupdate.rl.data
from memupdate.rl.data.conversation import Conversation, parse_session_date
from memupdate.rl.data.locomo import (
    LocomoError,
    default_locomo_path,
    load_locomo,
    load_sample,
    locomo_stats,
    sample_conversation_path,
    split_conversations,
)
from memupdate.scoring.categories import ADVERSARIAL, CATEGORY_NAMES
from memupdate.scoring.questions import qa_from_row, qa_row

# Per-category QA counts (1 multi-hop .. 5 adversarial), keyed by how many conversations the file holds:
# 8 = the shared development subset, 10 = the full locomo10.json (numbers from the data README).
KNOWN_QA_COUNTS = {
    8: {1: 213, 2: 256, 3: 76, 4: 681, 5: 360},
    10: {1: 282, 2: 321, 3: 96, 4: 841, 5: 446},
}


@pytest.fixture(scope="module")
def sample() -> Conversation:
    (conversation,) = load_sample()
    return conversation


def write(tmp_path: Path, content: str, name: str = "locomo.json") -> Path:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


# --- the shipped sample ---------------------------------------------------------------------------------


def test_sample_ships_with_the_package():
    path = sample_conversation_path()
    assert path.is_file()
    assert path.parent == Path(memupdate.rl.data.__file__).resolve().parent  # package data, not a repo-only file


def test_sample_counts(sample):
    assert sample.sample_id == "sample-1"
    assert (sample.speaker_a, sample.speaker_b) == ("Nadia", "Owen")
    assert [s.number for s in sample.sessions] == [1, 2, 3, 4]
    assert len(sample.turns) == 36
    assert len(sample.facts) == 31
    assert len(sample.qa) == 17
    assert set(sample.session_summaries) == {1, 2, 3, 4}
    assert {item.category for item in sample.qa} == set(CATEGORY_NAMES)
    assert [item.index for item in sample.qa] == list(range(17))


def test_sample_sessions_are_dated_and_turns_carry_their_session(sample):
    first = sample.session(1)
    assert first.date_time == "6:40 pm on 3 March, 2024"
    assert first.date == datetime.date(2024, 3, 3)
    assert all(s.date is not None for s in sample.sessions)
    assert all(turn.session == s.number for s in sample.sessions for turn in s.turns)
    assert sample.turn("D2:1").blip_caption.startswith("a photo of a grey dog")
    assert sample.turn("D2:2").blip_caption is None


def test_sample_fact_with_a_list_dia_id(sample):
    (fact,) = [f for f in sample.facts if len(f.dia_ids) > 1]
    assert fact.dia_ids == ("D2:1", "D2:3")
    assert fact.speaker == "Nadia"
    assert fact.session == 2
    assert fact.session_date == "11:15 am on 16 March, 2024"
    assert fact.session_day == datetime.date(2024, 3, 16)


def test_sample_facts_and_evidence_point_at_real_turns(sample):
    dia_ids = {turn.dia_id for turn in sample.turns}
    assert all(f.dia_ids and set(f.dia_ids) <= dia_ids for f in sample.facts)
    assert all(item.evidence and set(item.evidence) <= dia_ids for item in sample.qa)
    assert all(f.speaker in (sample.speaker_a, sample.speaker_b) for f in sample.facts)


def test_sample_has_relative_time_facts_to_anchor(sample):
    relative = ("yesterday", "last week", "two weekends ago", "next month", "next weekend", "next Tuesday")
    texts = [f.text for f in sample.facts]
    for phrase in relative:
        assert any(phrase in text for text in texts), phrase


def test_sample_int_answer_becomes_str(sample):
    (item,) = [q for q in sample.qa if q.question == "In what year did Owen buy his sailboat?"]
    assert item.answer == "2019"
    assert item.category_name == "temporal"


def test_sample_adversarial_item(sample):
    (item,) = [q for q in sample.qa if q.is_adversarial]
    assert item.category == ADVERSARIAL
    assert item.category_name == "adversarial"
    assert item.answer is None
    assert item.adversarial_answer == "a retired racing greyhound"


def test_qa_row_round_trips_every_question_through_json(sample):
    """What `data preprocess` writes into a verl row is what the reward reads back, adversarial answer included."""
    for item in sample.qa:
        assert qa_from_row(json.loads(json.dumps(qa_row(item)))) == item


def test_sample_stats(sample):
    stats = locomo_stats([sample])
    assert stats["conversations"] == 1
    assert (stats["sessions"], stats["turns"], stats["facts"], stats["qa"]) == (4, 36, 31, 17)
    assert list(stats["qa_by_category"]) == list(CATEGORY_NAMES.values())
    assert stats["qa_by_category"] == {
        "multi-hop": 3,
        "temporal": 8,
        "open-domain": 2,
        "single-hop": 3,
        "adversarial": 1,
    }
    (row,) = stats["per_conversation"]
    assert row["sample_id"] == "sample-1"
    assert row["qa_by_category"] == stats["qa_by_category"]


# --- the development file (skipped where absent) --------------------------------------------------------


@pytest.mark.locomo
def test_dev_file_stats(locomo_dev_file):
    conversations = load_locomo(locomo_dev_file)
    stats = locomo_stats(conversations)
    assert stats["conversations"] == len(conversations) == len(stats["per_conversation"])
    assert sum(stats["qa_by_category"].values()) == stats["qa"]
    for key in ("sessions", "turns", "facts", "qa"):
        assert sum(row[key] for row in stats["per_conversation"]) == stats[key]
    for name in CATEGORY_NAMES.values():
        assert sum(row["qa_by_category"][name] for row in stats["per_conversation"]) == stats["qa_by_category"][name]
    known = KNOWN_QA_COUNTS.get(len(conversations))
    if known is not None:
        assert stats["qa_by_category"] == {CATEGORY_NAMES[n]: count for n, count in known.items()}
    if len(conversations) == 8:
        assert stats["qa"] == 1586


@pytest.mark.locomo
def test_dev_file_records(locomo_dev_file):
    conversations = load_locomo(locomo_dev_file)
    for conversation in conversations:
        numbers = [s.number for s in conversation.sessions]
        assert numbers == sorted(numbers)
        assert all(s.turns for s in conversation.sessions)  # date-only session keys were skipped
        assert all(s.date is not None for s in conversation.sessions)
        assert all(f.dia_ids and all(isinstance(d, str) for d in f.dia_ids) for f in conversation.facts)
        assert all(f.session_date for f in conversation.facts)
        assert all(q.answer is None or isinstance(q.answer, str) for q in conversation.qa)
        assert all(q.answer is not None for q in conversation.qa if not q.is_adversarial)
        assert [q.index for q in conversation.qa] == list(range(len(conversation.qa)))


@pytest.mark.locomo
def test_dev_file_filtering_keeps_file_order(locomo_dev_file):
    ids = [c.sample_id for c in load_locomo(locomo_dev_file)]
    wanted = [ids[-1], ids[0]]
    assert [c.sample_id for c in load_locomo(locomo_dev_file, wanted)] == [ids[0], ids[-1]]
    assert [c.sample_id for c in load_locomo(locomo_dev_file, ids[0])] == [ids[0]]
    assert load_locomo(locomo_dev_file, []) == []


@pytest.mark.locomo
def test_dev_file_unknown_id_lists_available(locomo_dev_file):
    ids = [c.sample_id for c in load_locomo(locomo_dev_file)]
    with pytest.raises(LocomoError) as err:
        load_locomo(locomo_dev_file, [ids[0], "conv-nope"])
    message = str(err.value)
    assert "conv-nope" in message
    assert all(sample_id in message for sample_id in ids)


@pytest.mark.locomo
def test_dev_file_split(locomo_dev_file):
    conversations = load_locomo(locomo_dev_file)
    train, test = split_conversations(conversations)
    assert train == conversations[:7]
    assert test == conversations[7:]


# --- filtering, errors and helpers on small files -------------------------------------------------------


def test_unknown_id_in_sample_lists_available():
    with pytest.raises(LocomoError, match=r"unknown conversation id\(s\) conv-26 .*available: sample-1"):
        load_locomo(sample_conversation_path(), ["conv-26"])


def test_missing_file_names_path_and_fix(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(LocomoError) as err:
        load_locomo(missing)
    message = str(err.value)
    assert str(missing) in message
    assert "--locomo FILE" in message and "MEMUPDATE_LOCOMO_FILE" in message


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(LocomoError, match="is a directory"):
        load_locomo(tmp_path)


def test_not_json(tmp_path):
    path = write(tmp_path, "{not json")
    with pytest.raises(LocomoError, match="is not valid JSON"):
        load_locomo(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"sample_id": "x", "conversation": {}}, "expected a JSON list of samples, got dict"),
        (["conv-1"], "sample 0 is a str"),
        ([{"conversation": {}}], "sample 0 has no 'sample_id' key"),
        ([{"sample_id": "a", "conversation": {"speaker_a": "A", "speaker_b": "B"}}, {"sample_id": "b"}],
         "sample 1 has no 'conversation' key"),
        ([{"sample_id": "a", "conversation": {"speaker_b": "B"}}], "has no 'speaker_a' key"),
    ],
)
def test_wrong_shape(tmp_path, content, expected):
    path = write(tmp_path, json.dumps(content))
    with pytest.raises(LocomoError, match=expected) as err:
        load_locomo(path)
    assert "this does not look like LoCoMo's locomo10.json" in str(err.value)


def test_locomo_error_is_a_value_error():
    assert issubclass(LocomoError, ValueError)


def test_odd_shapes_are_tolerated(tmp_path):
    sample = {
        "sample_id": "odd",
        "conversation": {
            "speaker_a": "A",
            "speaker_b": "B",
            "session_1_date_time": "9:00 am on 1 June, 2023",
            "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}],
            "session_2_date_time": "9:00 am on 8 June, 2023",  # no session_2 list: skipped
        },
        "observation": {
            "session_1_observation": {
                "A": [
                    ["nested ids", [["D1:1"], "D1:2"]],
                    ["comma string", "D1:3, D1:4"],
                    ["no id"],
                    "bare text",
                ]
            }
        },
        "qa": [
            {"question": "q1", "answer": 2022, "evidence": ["D1:1; D1:2", "D", "D:1:3"], "category": 2},
            {"question": "q2", "adversarial_answer": "x", "evidence": [], "category": "5"},
        ],
    }
    (conversation,) = load_locomo(write(tmp_path, json.dumps([sample])))
    assert [s.number for s in conversation.sessions] == [1]
    assert [f.dia_ids for f in conversation.facts] == [("D1:1", "D1:2"), ("D1:3", "D1:4"), (), ()]
    assert [f.text for f in conversation.facts][-1] == "bare text"
    first, second = conversation.qa
    assert first.answer == "2022"
    assert first.evidence == ("D1:1", "D1:2", "D1:3")
    assert (second.category, second.answer, second.adversarial_answer) == (5, None, "x")
    assert conversation.session_summaries == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime.date(2023, 5, 8)),
        ("10:04 am on 19 December, 2023", datetime.date(2023, 12, 19)),
        ("9:00 am on 3 Sept, 2024", datetime.date(2024, 9, 3)),
        ("sometime in May", None),
        ("1:00 pm on 31 February, 2023", None),
        ("", None),
    ],
)
def test_parse_session_date(text, expected):
    assert parse_session_date(text) == expected


def test_split_is_first_n_then_rest():
    conversations = [f"c{i}" for i in range(10)]
    assert split_conversations(conversations) == (conversations[:7], conversations[7:])
    assert split_conversations(conversations, n_train=2) == (conversations[:2], conversations[2:])
    with pytest.raises(ValueError):
        split_conversations(conversations, n_train=-1)


def test_default_locomo_path(monkeypatch, tmp_path):
    monkeypatch.delenv("MEMUPDATE_LOCOMO_FILE", raising=False)
    assert default_locomo_path() is None
    monkeypatch.setenv("MEMUPDATE_LOCOMO_FILE", str(tmp_path / "locomo10.json"))
    assert default_locomo_path() == tmp_path / "locomo10.json"
    monkeypatch.setenv("MEMUPDATE_LOCOMO_FILE", "")
    assert default_locomo_path() is None


def test_fixture_helper_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMUPDATE_LOCOMO_FILE", str(tmp_path / "mine.json"))
    assert locomo_dev_path() == tmp_path / "mine.json"
    monkeypatch.delenv("MEMUPDATE_LOCOMO_FILE")
    assert locomo_dev_path().name == "locomo10-dev.json"
