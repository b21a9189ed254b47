"""A reading does not depend on wording: the same pairs in the first and third person, with other names, in
the past tense, and a fact within a broader one, are read alike by the shipped judge and acted on as the
pair asks; and the rewriting itself (`text.forms`, `rl.data.relation_forms`) keeps every label's pairs
and times."""

from __future__ import annotations

import pytest

from memupdate.judge.decision import change_chance
from memupdate.judge.local import LocalJudge
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.store_view import StoreBank
from memupdate.judge.verdict import Statement
from memupdate.rl.data.relation_forms import bank_in_form, pair_in_form
from memupdate.text.forms import subject_of, swap_names, to_first, to_past, to_third

OLDER, NEWER = "2024-01-01", "2024-03-01"
# (older, newer, what a bank should do): each a pair about one named person, written in the third person.
BATTERY = [
    ("Alice is vegetarian.", "Alice is no longer vegetarian.", "change"),
    ("Bo's favourite colour is blue.", "Bo's favourite colour is now green.", "change"),
    ("Dana works at Acme Corp as an engineer.", "Dana quit Acme Corp and now works at Globex.", "change"),
    ("Omar lives in Lisbon.", "Omar moved to Toronto last month.", "change"),
    ("Alex lives in Seattle.", "Alex lives in the USA.", "leave"),
    ("Chen has a library card.", "Chen collects old postcards.", "leave"),
    ("Ana drives a mini van.", "Ana loves dogs.", "leave"),
    ("Priya works as a nurse.", "Priya enjoys hiking on weekends.", "leave"),
    ("Marcus has two sisters.", "Marcus plays the guitar in a band.", "leave"),
]


def forms_of(older: str, newer: str) -> dict[str, tuple[str, str]]:
    """The pair in the third person as given, the first person, another name, and the older in the past."""
    name = subject_of([older, newer])
    other = "Kofi" if name != "Kofi" else "Lea"
    return {
        "third": (older, newer),
        "first": (to_first(older, name), to_first(newer, name)),
        "names": (swap_names(older, {name: other}), swap_names(newer, {name: other})),
        "past": (to_past(older), newer),
    }


@pytest.fixture(scope="module")
def local_judge() -> LocalJudge:
    return LocalJudge()


def test_the_rewrites_read_as_a_person_would_write_them() -> None:
    assert to_third("I drive a mini van.", "Ana") == "Ana drives a mini van."
    assert to_third("I'm a vegetarian and my sister is too.", "Ana") == "Ana is a vegetarian and Ana's sister is too."
    assert to_third("i dont draw faces", "Ana") == "Ana doesn't draw faces"
    assert to_first("Ana drives a mini van.", "Ana") == "I drive a mini van."
    assert to_first("Bo's favourite colour is now green.", "Bo") == "My favourite colour is now green."
    assert to_first("Nora Fishel and Eliza Woodley run a podcast.", "Nora Fishel") == "Eliza Woodley and I run a podcast."
    assert to_past("Alex lives in Seattle.") == "Alex lived in Seattle."
    assert to_past("I am a nurse.") == "I was a nurse."
    assert to_past("Sam moved to Berlin.") == "Sam moved to Berlin."  # already past
    assert subject_of(["Lives in Paris", "Works at Acme"]) is None  # terse memories name no one
    for older, newer, _ in BATTERY:  # every form is a real rewrite
        forms = forms_of(older, newer)
        assert len({pair for pair in forms.values()}) == 4, forms


def test_a_bank_in_another_form_keeps_its_pairs_labels_and_times() -> None:
    statements = (Statement("I live in Paris.", OLDER), Statement("I love dogs.", OLDER), Statement("I moved to Berlin.", NEWER))
    bank = StoreBank("persona-x", "persona", statements, ((0, 1), (0, 2)), {(0, 2): "update"})
    third = bank_in_form(bank, "third")
    name = third.statements[0].text.split()[0]
    assert [s.text for s in third.statements] == [f"{name} lives in Paris.", f"{name} loves dogs.", f"{name} moved to Berlin."]
    assert (third.met, third.labels, [s.time for s in third.statements]) == (bank.met, bank.labels, [s.time for s in statements])
    past = bank_in_form(bank, "past")
    assert past.statements[2].text == "I moved to Berlin."  # the newer of an update stays as it was said
    update = LabelledPair("Sam lives in Paris.", "Sam lives in Berlin.", "update", OLDER, NEWER, group="g")
    assert pair_in_form(update, "past").second == "Sam lives in Berlin."
    assert pair_in_form(update, "first").first == "I live in Paris."


def test_the_judge_reads_every_form_of_a_pair_alike(local_judge) -> None:
    """Two true facts are left in every form (and so never asked about); a change is read as one in every
    form, its forms' chances within 0.02 of each other, and acted on (applied or asked) as given. Which of
    apply, ask and leave a change gets can still differ between forms where the bound falls inside that
    spread: "Kofi lives in Lisbon." -> "Kofi moved to Toronto last month." reads 0.988 against the ask bound
    0.9889, its other forms 0.989-0.991."""
    pairs, where = [], []
    for n, (older, newer, _) in enumerate(BATTERY):
        for form, (a, b) in forms_of(older, newer).items():
            pairs.append((Statement(a, OLDER), Statement(b, NEWER)))
            where.append((n, form))
    read: dict[int, dict[str, tuple[str, float]]] = {}
    for (n, form), verdict in zip(where, local_judge.judge(pairs), strict=True):
        read.setdefault(n, {})[form] = (local_judge.auto_apply.act(verdict), change_chance(verdict))
    for n, forms in read.items():
        older, _, asks = BATTERY[n]
        acts, chances = {f: a for f, (a, _) in forms.items()}, [c for _, c in forms.values()]
        if asks == "leave":
            assert set(acts.values()) == {"leave"}, (older, forms)
        else:
            assert min(chances) >= 0.95 and max(chances) - min(chances) <= 0.02 and acts["third"] != "leave", (older, forms)


def test_the_screen_keeps_every_form_of_a_change(local_judge) -> None:
    """The screen before the judge (`judge.screen`, which reads the pair's words as well as its vectors)
    drops no change of the battery in any form: a change reaches the judge however it is worded."""
    import numpy as np

    from memupdate.judge.screen import Screen
    from memupdate.store import get_embedder

    screen, embedder = Screen.for_judge(local_judge), get_embedder()
    assert screen is not None, "the shipped screen serves the shipped judge"
    changes = [pair for older, newer, what in BATTERY if what == "change" for pair in forms_of(older, newer).values()]
    vectors = np.asarray(embedder.embed([text for pair in changes for text in pair]), dtype=np.float32)
    kept = screen.keep(vectors[0::2], vectors[1::2], changes)
    assert kept.all(), [pair for pair, ok in zip(changes, kept, strict=True) if not ok]
