"""Merge and split text strategies on realistic LoCoMo-style facts, edge cases and every dev fact."""

from __future__ import annotations

import json

import pytest
from locomo_fixtures import locomo_dev_file_fixture  # noqa: F401  (fixture `locomo_dev_file`)

from memupdate.rl.data.locomo import sample_conversation_path
from memupdate.text.strategies import (
    concatenate,
    content_words,
    extract_common,
    jaccard,
    sentences,
    split_speaker,
    split_temporal,
    split_thematic,
    summarize,
)

SAMPLE = sample_conversation_path()

# Near-duplicates of the sample conversation: the same fact told in sessions 1, 2 and 3.
NURSE = [
    "Nadia works night shifts as an ER nurse.",
    "Nadia still works night shifts in the ER and runs at 7 am after her shifts.",
    "Nadia is an emergency room nurse who works night shifts.",
]


def sample_facts() -> list[str]:
    (sample,) = json.loads(SAMPLE.read_text())
    return [
        fact
        for by_speaker in sample["observation"].values()
        for facts in by_speaker.values()
        for fact, _ in facts
    ]


def assert_keeps_content(content: str, parts: list[str]) -> None:
    assert parts and all(part.strip() for part in parts), parts
    assert content_words(content) <= set().union(*map(content_words, parts)), (content, parts)


# ---------------------------------------------------------------- helpers


def test_content_words_and_jaccard():
    assert content_words("Owen's sister Mara is getting married next month.") == {
        "owen", "sister", "mara", "getting", "married", "next", "month"
    }
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard("Owen teaches chemistry.", "Owen teaches chemistry at Harbor High.") == pytest.approx(
        3 / 5
    )
    assert jaccard(set(), set()) == 0.0


def test_sentences_keeps_abbreviations_and_decimals_together():
    text = "Dr. Lee met Caroline at the U.S. Army base, e.g. the one 3.5 km away. She ran 5.5 miles! Was it fun? Yes."
    assert sentences(text) == [
        "Dr. Lee met Caroline at the U.S. Army base, e.g. the one 3.5 km away.",
        "She ran 5.5 miles!",
        "Was it fun?",
        "Yes.",
    ]
    assert sentences("Mr. and Mrs. Smith visited St. Louis. Then they left") == [
        "Mr. and Mrs. Smith visited St. Louis.",
        "Then they left",
    ]
    assert sentences("  ") == []
    assert sentences("one line\nanother line") == ["one line", "another line"]


# ---------------------------------------------------------------- merging


def test_concatenate_drops_exact_duplicates_and_terminates_sentences():
    merged = concatenate(["Owen teaches chemistry at Harbor High", "Owen teaches chemistry at Harbor High.",
                          "Owen bought his sailboat in 2019. Owen teaches chemistry at harbor high!"])
    assert merged == "Owen teaches chemistry at Harbor High. Owen bought his sailboat in 2019."


def test_concatenate_keeps_order_and_near_duplicates():
    assert concatenate(NURSE[:2]) == " ".join(NURSE[:2])


def test_extract_common_keeps_the_longest_shared_variant_once():
    assert extract_common(NURSE) == NURSE[1]
    shared = extract_common([
        "Owen teaches chemistry at Harbor High.",
        "Owen teaches chemistry at Harbor High. Owen bought his sailboat in 2019.",
        "Owen's sister Mara is getting married next month.",
    ])
    assert shared == "Owen teaches chemistry at Harbor High."


def test_extract_common_is_none_without_shared_facts():
    assert extract_common(["Owen teaches chemistry at Harbor High.", "Nadia has a cat named Pickle."]) is None


def test_summarize_collapses_near_duplicates_and_respects_the_budget():
    pets = ["Nadia has a cat named Pickle and is allergic to shellfish.",
            "Nadia adopted a retired racing greyhound named Biscuit last week."]
    summary = summarize([*NURSE, *pets], max_words=60)
    assert summary == " ".join([NURSE[1], *pets])  # the three nurse facts become their longest variant
    short = summarize([*NURSE, *pets], max_words=20)
    assert len(short.split()) <= 20 and short in summary
    assert (
        summarize(["Owen teaches chemistry at Harbor High."], max_words=1)
        == "Owen teaches chemistry at Harbor High."
    )


def test_summarize_keeps_the_central_sentences_in_order():
    contents = ["Nadia adopted Biscuit last week.", "Owen teaches chemistry.",
                "Biscuit is a retired racing greyhound.", "Biscuit and Pickle nap together."]
    assert (
        summarize(contents, max_words=12)
        == "Nadia adopted Biscuit last week. Biscuit is a retired racing greyhound."
    )


# ---------------------------------------------------------------- splitting


@pytest.mark.parametrize(
    ("content", "parts"),
    [
        ("Nadia has a cat named Pickle and is allergic to shellfish.",
         ["Nadia has a cat named Pickle.", "Nadia is allergic to shellfish."]),
        ("Owen bought his sailboat in 2019 and his favorite band is The Lumineers.",
         ["Owen bought his sailboat in 2019.", "Owen's favorite band is The Lumineers."]),
        ("Owen moved into the flat on Juniper Street last Saturday and has started learning the banjo.",
         ["Owen moved into the flat on Juniper Street last Saturday.", "Owen has started learning the banjo."]),
        ("Owen gave a toast at Mara's wedding, and Mara is honeymooning in Portugal for two weeks.",
         ["Owen gave a toast at Mara's wedding.", "Mara is honeymooning in Portugal for two weeks."]),
        ("Nadia's ankle is healing and she now plans to run the Harvest Half Marathon in October.",
         ["Nadia's ankle is healing.", "Nadia now plans to run the Harvest Half Marathon in October."]),
        ("Nadia's cat Pickle is upset about the new dog and hides on top of the fridge.",
         ["Nadia's cat Pickle is upset about the new dog.", "Nadia's cat Pickle hides on top of the fridge."]),
        ("Nadia sprained her ankle. She withdrew from the Riverside Half Marathon.",
         ["Nadia sprained her ankle.", "Nadia withdrew from the Riverside Half Marathon."]),
    ],
)
def test_split_thematic_packed_facts(content, parts):
    assert split_thematic(content) == parts


@pytest.mark.parametrize(
    "content",
    [
        "Nadia's cat Pickle and dog Biscuit now nap together on the couch.",  # a list, not two clauses
        "Nadia loves cats and dogs.",
        "Caroline and Melanie went hiking.",
        "Tim finds sports a way to express himself and stay positive.",  # infinitives, not finite verbs
        "Caroline values having people around her who accept and support her.",
        "Gina supports and encourages Jon in his business dreams.",
        "Nate took his turtles out for a walk and they are now relaxing in the tank.",  # "they" is not Nate
        "Caroline went to the support group. The support group made Caroline feel accepted.",  # same topic
        "Owen teaches chemistry at Harbor High.",
        "",
        "   ",
    ],
)
def test_split_thematic_leaves_single_facts_whole(content):
    assert split_thematic(content) == [content]


def test_split_thematic_on_the_sample_never_loses_words():
    facts = sample_facts()
    split = [f for f in facts if len(split_thematic(f)) > 1]
    assert len(split) >= 5
    for fact in facts:
        parts = split_thematic(fact)
        assert_keeps_content(fact, parts)
        assert len(parts) == 1 or all(p.endswith(".") and p[0].isupper() for p in parts)


def test_split_temporal_one_time_expression_per_part():
    assert split_temporal(
        "Nadia ran her first 10k yesterday and will run the Riverside Half Marathon in May."
    ) == [
        "Nadia ran her first 10k yesterday.",
        "Nadia will run the Riverside Half Marathon in May.",
    ]
    text = ("Nadia adopted Biscuit last week (the week before 16 March 2024). Biscuit raced for four years. "
            "She sprained her ankle yesterday and withdrew from the race.")
    assert split_temporal(text) == [  # the undated sentence stays with the one before, the anchor counts once
        "Nadia adopted Biscuit last week (the week before 16 March 2024). Biscuit raced for four years.",
        "Nadia sprained her ankle yesterday and withdrew from the race.",
    ]


def test_split_temporal_nothing_to_split():
    for content in ["Owen moved into the flat on Juniper Street last Saturday and has started learning the banjo.",
                    "Owen teaches chemistry at Harbor High.", ""]:
        assert split_temporal(content) == [content]


def test_split_speaker_groups_by_first_named_speaker():
    text = ("Nadia adopted Biscuit last week. Owen took the boat out with his dad and got caught in a squall. "
            "He was fine. Nadia is an ER nurse.")
    assert split_speaker(text, ["Nadia", "Owen"]) == [
        "Nadia adopted Biscuit last week. Nadia is an ER nurse.",
        "Owen took the boat out with his dad and got caught in a squall. He was fine.",
    ]
    assert split_speaker("Nadia has a cat, and Owen has a sailboat.", ["Nadia", "Owen"]) == [
        "Nadia has a cat.",
        "Owen has a sailboat.",
    ]


def test_split_speaker_single_speaker_or_none():
    text = "Nadia offered to help Owen move and is off night shifts until Thursday."
    assert split_speaker(text, ["Nadia", "Owen"]) == [text]  # Owen is named, but after Nadia in one clause
    assert split_speaker("They talked for hours.", ["Nadia", "Owen"]) == ["They talked for hours."]
    assert split_speaker(text, []) == [text]


@pytest.mark.locomo
def test_strategies_on_every_dev_fact(locomo_dev_file):
    facts = [
        fact
        for sample in json.loads(locomo_dev_file.read_text())
        for by_speaker in sample["observation"].values()
        for speaker_facts in by_speaker.values()
        for fact, *_ in speaker_facts
    ]
    assert len(facts) > 1000
    split = 0
    for fact in facts:
        parts = split_thematic(fact)
        assert_keeps_content(fact, parts)
        split += len(parts) > 1
        assert_keeps_content(fact, split_temporal(fact))
        assert_keeps_content(fact, split_speaker(fact, ["Caroline", "Melanie"]))
    assert 0 < split < len(facts)
    for a, b in zip(facts, facts[1:], strict=False):  # merges of neighbouring facts never fail
        assert concatenate([a, b]) and summarize([a, b])
        common = extract_common([a, b])  # None when they share nothing, else only what they said
        assert common is None or (common.strip() and content_words(common) <= content_words(a) | content_words(b))
