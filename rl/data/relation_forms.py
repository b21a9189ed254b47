"""People's banks and labelled pairs rewritten in other forms (`text.forms`): the judge trains on every
form, and each form of the evaluation part's banks is measured on its own.

    from memupdate.rl.data.relation_forms import bank_in_form, pair_in_form
    bank_in_form(bank, "third")     # a first-person bank about a named person ("I drive" -> "Ana drives")
    bank_in_form(bank, "first")     # a bank about a named person in the first person ("Ana drives" -> "I drive")
    bank_in_form(bank, "names")     # other names (a first-person bank: third person with another name)
    bank_in_form(bank, "past")      # about half the statements in the past tense, never the newer of an update

Labels and times stay as they are: the same pairs in another form. A form that does not apply to a bank
(a first-person bank has no names to swap) gives the nearest one that does, so each form is a real rewrite.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from memupdate.judge.pairs import LabelledPair
from memupdate.judge.store_view import StoreBank
from memupdate.text.forms import (
    FORMS,
    is_first_person,
    names_in,
    subject_of,
    swap_names,
    to_first,
    to_past,
    to_third,
)

NAMES = ("Ana", "Ben", "Chen", "Dana", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas", "Kira", "Luis", "Maya", "Noor",
         "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Vik", "Wen", "Yara", "Zane", "Alex", "Bo", "Carla",
         "Dev", "Esme", "Farah", "Gus", "Hana", "Ivo", "Jun", "Kofi", "Lea", "Milo", "Nadia", "Olga", "Pablo", "Rhea")
SURNAMES = ("Varga", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Haddad", "Kowalski", "Reyes", "Brennan", "Sato")


def _pick(key: str, options: Sequence[str], avoid: str | None = None) -> str:
    """A deterministic choice of `options` for `key`, other than `avoid`."""
    index = int(hashlib.sha1(key.encode()).hexdigest(), 16)
    choices = [o for o in options if o != avoid] or list(options)
    return choices[index % len(choices)]


def _coin(key: str) -> bool:
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 2 == 0


def rewrite(texts: Sequence[str], form: str, key: str, keep_present: frozenset[int] = frozenset()) -> list[str]:
    """`texts` (one person's statements) in `form`, the same rewrite for all (a name chosen by `key`).
    `keep_present`: indices the past form leaves in the present (the newer of an update)."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}: use one of {', '.join(FORMS)}")
    if form == "given":
        return list(texts)
    first_person = sum(is_first_person(t) for t in texts) * 2 >= len(texts)
    if form == "past":
        return [t if i in keep_present or not _coin(f"{key}:{t}") else to_past(t) for i, t in enumerate(texts)]
    if first_person and form in ("third", "names"):
        name = _pick(key + form, NAMES)
        return [to_third(t, name) if is_first_person(t) else t for t in texts]
    subject = subject_of(texts)
    if form == "first" and subject:
        return [to_first(t, subject) for t in texts]
    names = names_in(texts)
    if names:  # "names", or "third"/"first" on a bank with no one person first
        mapping = {}
        for name in names:
            parts = name.split()
            other = _pick(f"{key}:{name}", NAMES, avoid=parts[0])
            mapping[name] = f"{other} {_pick(key + name, SURNAMES)}" if len(parts) > 1 else other
        return [swap_names(t, mapping) for t in texts]
    return list(texts)


def bank_in_form(bank: StoreBank, form: str) -> StoreBank:
    """`bank` with its statements in `form` (the same pairs, labels and times)."""
    newer = frozenset(max(pair, key=lambda i: bank.statements[i].time or "") for pair, label in bank.labels.items() if label == "update")
    texts = rewrite([s.text for s in bank.statements], form, bank.group, newer)
    statements = tuple(replace(s, text=t) for s, t in zip(bank.statements, texts, strict=True))
    return replace(bank, statements=statements)


def pair_in_form(pair: LabelledPair, form: str) -> LabelledPair:
    """`pair` with both statements in `form` (the newer of an update stays present in the past form)."""
    keep = frozenset({1}) if pair.label == "update" else frozenset()
    first, second = rewrite([pair.first, pair.second], form, f"{pair.group}:{pair.first}", keep)
    return replace(pair, first=first, second=second)


def in_other_forms(pairs: Sequence[LabelledPair], seed: int = 0) -> list[LabelledPair]:
    """Each pair once more, in one other form chosen by its text (so every label appears in every form),
    where that form changes it; marked generated (they may train, never evaluate)."""
    out = []
    for pair in pairs:
        form = _pick(f"{seed}:{pair.first}|{pair.second}", FORMS[1:])
        other = pair_in_form(pair, form)
        if (other.first, other.second) != (pair.first, pair.second):
            out.append(replace(other, generated=True))
    return out
