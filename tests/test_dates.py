"""Relative time anchoring: date arithmetic, idempotence, the sample's QA dates and every dev LoCoMo fact."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest
from locomo_fixtures import locomo_dev_file_fixture  # noqa: F401  (fixture `locomo_dev_file`)

from memupdate.rl.data.conversation import parse_session_date
from memupdate.rl.data.locomo import sample_conversation_path
from memupdate.text.dates import (
    TIME_EXPRESSION,
    anchor_relative_dates,
    format_day,
    has_relative_time,
    resolve_relative,
)

SAMPLE = sample_conversation_path()
MONDAY = date(2023, 5, 8)  # LoCoMo's first session day


def observation_facts(path: Path):
    """(fact, session day) for every observation fact of a LoCoMo file."""
    for sample in json.loads(path.read_text()):
        conversation = sample["conversation"]
        for key, by_speaker in sample["observation"].items():
            day = parse_session_date(conversation[key.replace("_observation", "_date_time")])
            for facts in by_speaker.values():
                for fact, *_ in facts:
                    yield fact, day


def test_format_day():
    assert format_day(date(2023, 5, 7)) == "7 May 2023"
    assert format_day(date(2024, 12, 25)) == "25 December 2024"


@pytest.mark.parametrize(
    ("expression", "day", "expected"),
    [
        ("yesterday", MONDAY, "7 May 2023"),
        ("Yesterday", date(2024, 3, 1), "29 February 2024"),  # month boundary, leap year
        ("yesterday", date(2023, 1, 1), "31 December 2022"),  # year boundary
        ("last night", MONDAY, "7 May 2023"),
        ("today", MONDAY, "8 May 2023"),
        ("tonight", MONDAY, "8 May 2023"),
        ("this morning", MONDAY, "8 May 2023"),
        ("tomorrow", date(2022, 12, 31), "1 January 2023"),
        ("last week", MONDAY, "the week before 8 May 2023"),
        ("next week", MONDAY, "the week after 8 May 2023"),
        ("this week", MONDAY, "the week of 8 May 2023"),
        ("last weekend", MONDAY, "the weekend of 6-7 May 2023"),
        ("two weekends ago", MONDAY, "the weekend of 29-30 April 2023"),
        ("last weekend", date(2023, 5, 7), "the weekend of 29-30 April 2023"),  # said on a Sunday
        ("two weekends ago", date(2024, 3, 16), "the weekend of 2-3 March 2024"),  # said on a Saturday
        ("this weekend", date(2024, 3, 16), "the weekend of 16-17 March 2024"),
        ("next weekend", date(2024, 3, 16), "the weekend of 23-24 March 2024"),
        ("this weekend", date(2023, 8, 16), "the weekend of 19-20 August 2023"),  # said on a Wednesday
        ("last weekend", date(2023, 10, 3), "the weekend of 30 September-1 October 2023"),
        ("last weekend", date(2023, 1, 2), "the weekend of 31 December 2022-1 January 2023"),
        ("last Saturday", date(2024, 3, 27), "23 March 2024"),
        ("last Saturday", date(2024, 3, 16), "9 March 2024"),  # said on a Saturday: a week before
        ("last Saturday", date(2024, 1, 2), "30 December 2023"),
        ("on Friday", MONDAY, "5 May 2023"),
        ("next Tuesday", date(2024, 3, 27), "2 April 2024"),
        ("this Friday", MONDAY, "12 May 2023"),
        ("3 days ago", date(2023, 3, 2), "27 February 2023"),
        ("three days ago", MONDAY, "5 May 2023"),
        ("a few days ago", MONDAY, "around 5 May 2023"),
        ("a couple of weeks ago", MONDAY, "around 24 April 2023"),
        ("3 months ago", date(2023, 1, 20), "around October 2022"),
        ("3 years ago", MONDAY, "2020"),
        ("a few years ago", MONDAY, "around 2020"),
        ("last month", date(2023, 1, 20), "December 2022"),
        ("next month", date(2022, 12, 17), "January 2023"),
        ("this month", MONDAY, "May 2023"),
        ("last year", date(2023, 1, 20), "2022"),
        ("next year", date(2022, 12, 17), "2023"),
        ("last summer", MONDAY, "summer 2022"),
        ("last summer", date(2023, 10, 17), "summer 2023"),
        ("next winter", MONDAY, "winter 2023-2024"),
        ("last May", MONDAY, "May 2022"),
        ("next June", MONDAY, "June 2023"),
    ],
)
def test_resolve_relative(expression, day, expected):
    assert resolve_relative(expression, day) == expected


def test_weekday_and_weekend_follow_the_tense():
    assert resolve_relative("on Friday", MONDAY, future=True) == "12 May 2023"
    assert resolve_relative("Monday", MONDAY, future=True) == "15 May 2023"
    assert resolve_relative("over the weekend", MONDAY) == "the weekend of 6-7 May 2023"
    assert resolve_relative("on the weekend", MONDAY, future=True) == "the weekend of 13-14 May 2023"
    assert anchor_relative_dates("Nadia is off nights until Thursday.", date(2024, 3, 16)) == (
        "Nadia is off nights until Thursday (21 March 2024)."
    )


@pytest.mark.parametrize("expression", ["8 May 2023", "in May", "2019", "recently", "the Lakeshore 10k", ""])
def test_absolute_or_vague_expressions_are_not_resolved(expression):
    assert resolve_relative(expression, MONDAY) is None


def test_anchor_relative_dates():
    text = "Caroline went to the LGBTQ support group yesterday"
    assert (
        anchor_relative_dates(text, MONDAY)
        == "Caroline went to the LGBTQ support group yesterday (7 May 2023)"
    )
    two = anchor_relative_dates(
        "Melanie went camping two weekends ago and ran a charity race last Saturday.", MONDAY
    )
    assert two == (
        "Melanie went camping two weekends ago (the weekend of 29-30 April 2023) "
        "and ran a charity race last Saturday (6 May 2023)."
    )


def test_anchoring_leaves_other_text_alone():
    for text in [
        "Owen teaches chemistry at Harbor High.",
        "Owen bought his sailboat in 2019.",
        "James is looking forward to playing Cyberpunk 2077.",
        "Deborah hosted a yoga class on a Friday.",
        "This may help Nate, who plays every Saturday.",  # "may" the verb, "every Saturday" a habit
        "Caroline met her friends on Monday, 8 May 2023.",
        "",
    ]:
        assert anchor_relative_dates(text, MONDAY) == text
        assert not has_relative_time(text)


def test_anchoring_is_idempotent():
    text = "Nadia adopted Biscuit last week, ran 10k yesterday and moves next month; Owen sailed two weekends ago."
    once = anchor_relative_dates(text, MONDAY)
    assert once != text and has_relative_time(text)
    assert anchor_relative_dates(once, MONDAY) == once
    assert anchor_relative_dates(once, date(2030, 1, 1)) == once  # a later day does not re-anchor either
    assert not has_relative_time(once)


def test_time_expression_finds_relative_and_absolute():
    found = [m.group(0) for m in TIME_EXPRESSION.finditer(
        "Owen bought a boat in 2019, sailed last weekend (the weekend of 6-7 May 2023) and races on 8 June."
    )]
    assert found == ["2019", "last weekend (the weekend of 6-7 May 2023)", "8 June"]


def test_sample_conversation_dates_match_its_answers():
    """Anchoring each evidence fact yields the date the sample's temporal questions expect."""
    (sample,) = json.loads(SAMPLE.read_text())
    conversation = sample["conversation"]
    by_dia: dict[str, list[str]] = {}
    for key, by_speaker in sample["observation"].items():
        day = parse_session_date(conversation[key.replace("_observation", "_date_time")])
        for facts in by_speaker.values():
            for fact, dia in facts:
                for dia_id in [dia] if isinstance(dia, str) else dia:
                    by_dia.setdefault(dia_id, []).append(anchor_relative_dates(fact, day))
    temporal = [q for q in sample["qa"] if q["category"] == 2]
    assert len(temporal) >= 7
    for qa in temporal:
        assert any(str(qa["answer"]) in fact for fact in by_dia[qa["evidence"][0]]), qa["question"]


@pytest.mark.locomo
def test_anchoring_every_dev_fact(locomo_dev_file):
    facts = list(observation_facts(locomo_dev_file))
    assert len(facts) > 1000
    anchored = 0
    for fact, day in facts:
        once = anchor_relative_dates(fact, day)
        assert anchor_relative_dates(once, day) == once, fact
        assert not has_relative_time(once), once
        if once != fact:
            anchored += 1
            assert has_relative_time(fact)
            assert re.sub(r" \([^()]*\d[^()]*\)", "", once) == fact  # dates inserted, nothing rewritten
    print(f"\nanchored {anchored} of {len(facts)} LoCoMo dev facts")
    assert anchored >= 100  # 167 on the 8-conversation development file
