"""Deterministic text strategies for merging and splitting memories when the model gives no text.

Merging (a list of two or more memory contents -> one text)::

    >>> concatenate(["Owen teaches chemistry at Harbor High.", "Owen teaches chemistry at Harbor High"])
    'Owen teaches chemistry at Harbor High.'
    >>> extract_common(["Nadia works night shifts as an ER nurse.",
    ...                 "Nadia is an emergency room nurse who works night shifts. She has a cat."])
    'Nadia is an emergency room nurse who works night shifts.'
    >>> summarize(["Nadia adopted Biscuit last week.", "Biscuit is a retired racing greyhound."], max_words=60)
    'Nadia adopted Biscuit last week. Biscuit is a retired racing greyhound.'

Splitting (one memory content -> parts; ``[content]`` when there is nothing to split)::

    >>> split_thematic("Nadia has a cat named Pickle and is allergic to shellfish.")
    ['Nadia has a cat named Pickle.', 'Nadia is allergic to shellfish.']
    >>> split_thematic("Owen bought his sailboat in 2019 and his favorite band is The Lumineers.")
    ['Owen bought his sailboat in 2019.', "Owen's favorite band is The Lumineers."]
    >>> split_temporal("Nadia sprained her ankle yesterday. She starts a pottery class next Tuesday.")
    ['Nadia sprained her ankle yesterday.', 'Nadia starts a pottery class next Tuesday.']
    >>> split_speaker("Nadia offered to help Owen move, and Owen found a flat.", ["Nadia", "Owen"])
    ['Nadia offered to help Owen move.', 'Owen found a flat.']

Similarity is token Jaccard over ``content_words`` (lower-cased words without stopwords).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from memupdate.text.dates import MONTHS, TIME_EXPRESSION, WEEKDAYS, anchored, format_day, memory_day

if TYPE_CHECKING:
    from memupdate.store import MemoryRecord

__all__ = [
    "concatenate",
    "concatenate_memories",
    "content_words",
    "extract_common",
    "jaccard",
    "sentences",
    "split_speaker",
    "split_temporal",
    "split_thematic",
    "summarize",
]

COMMON_JACCARD = 0.5  # extract_common: two sentences state the same fact
DUPLICATE_JACCARD = 0.6  # summarize: near-duplicate sentences collapse into one
TOPIC_JACCARD = 0.25  # split_thematic: adjacent clauses about the same topic stay together

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each even ever every few for from further had has
    have having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours out over own same she should so some still such
    than that the their theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours really""".split()
)
AUXILIARIES = frozenset(
    "is are was were be been am has have had do does did will would can could should may might must shall "
    "isn't aren't wasn't weren't hasn't haven't hadn't doesn't didn't won't can't couldn't".split()
)
ADVERBS = frozenset("also still now recently often always never just then later finally usually even already "
                    "not currently sometimes again soon".split())
# Finite verbs (3rd person, past) common in LoCoMo facts: only these start a subject-less clause, so
# "to express himself and stay positive" or "given her courage" is never cut off.
_REGULAR = """love like enjoy want plan hope need try start finish join attend adopt play paint work volunteer
    help use share create visit travel hike camp practice decide consider continue look seem receive support
    encourage appreciate celebrate describe explain mention ask offer suggest recommend show include remind own
    live stay call collect cook bake watch learn sign move value believe listen talk walk explore open organize
    return enter pass miss plant prepare dance perform post change improve raise save train compete check wish
    hate prefer sprain injure marry graduate study apply struggle manage host design launch earn expect hide
    nap sail relax rescue""".split()
_IRREGULAR = """goes went runs ran gets got makes made takes took finds found buys bought gives gave sees saw meets
    met feels felt begins began keeps kept holds held wins won loses lost spends spent thinks thought brings
    brought teaches taught tells told says said sells sold grows grew builds built wears wore writes wrote breaks
    broke comes came becomes became leaves left knows knew draws drew rides rode swims swam sings sang flies flew
    drives drove eats ate catches caught chooses chose falls fell sits sat stands stood withdrew underwent""".split()
FINITE_VERBS = frozenset(
    _IRREGULAR
    + [base + end for base in _REGULAR for end in ("s", "es", "d", "ed", base[-1] + "ed")]
    + [base[:-1] + end for base in _REGULAR if base.endswith("y") for end in ("ies", "ied")]
)
_SUBJECT_PRONOUNS = frozenset("he she i we you".split())  # not they/it: they rarely mean the named person
_PRONOUNS = _SUBJECT_PRONOUNS | frozenset("they it his her their its".split())
_DETERMINERS = frozenset("his her their my our its the a an this".split())
_OBJECT_STARTS = _DETERMINERS | frozenset("him them it".split())  # "adopted a dog" but not "excited to"
_DANGLING = frozenset("he she they we i and but or".split())
_BASE_FORMS = frozenset("do have be been being".split())  # "... to get attention and do more ads"
_SUBORDINATORS = frozenset("who whom whose which that where when because if while since".split())
_NOT_NAMES = (
    STOPWORDS | {w.lower() for w in MONTHS + WEEKDAYS} | {"yesterday", "today", "tonight", "last", "next"}
)

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*\s+|\s*\n\s*")
_ABBREVIATIONS = frozenset("dr. mr. mrs. ms. prof. st. jr. sr. vs. mt. no. approx. e.g. i.e.".split())
_CLAUSE_SEP = re.compile(
    r";\s+|,?\s+and\s+also\s+|,\s+and\s+|,?\s+but\s+|,\s+while\s+|,\s+whereas\s+|\s+and\s+", re.IGNORECASE
)

# A clause: (separator before it, its text, (name, phrase) of the subject of its sentence or None).
Unit = tuple[str, str, tuple[str | None, str] | None]


def content_words(text: str) -> set[str]:
    """Lower-cased words of ``text`` without stopwords and possessive "'s": "Owen's boat" -> {"owen", "boat"}."""
    words = (w.split("'")[0] for w in _WORD.findall(text.lower().replace("’", "'")))
    return {w for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())}


def jaccard(a: Iterable[str] | str, b: Iterable[str] | str) -> float:
    """Jaccard similarity of two word sets (a string is first turned into its ``content_words``); 0 if both empty."""
    a = content_words(a) if isinstance(a, str) else set(a)
    b = content_words(b) if isinstance(b, str) else set(b)
    return len(a & b) / len(a | b) if a | b else 0.0


def sentences(text: str) -> list[str]:
    """Sentences of ``text``, stripped; "Dr. Lee", "e.g. this", "3.5 km", "the U.S. Army" stay in one piece."""
    text = text.strip()
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        newline = "\n" in m.group()
        following = text[m.end() : m.end() + 1]
        if not newline and not (following.isupper() or following.isdigit() or following in "\"'“‘("):
            continue
        if not newline and m.group()[0] == "." and _is_abbreviation(text[: m.start() + 1]):
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


# ---------------------------------------------------------------- merging


def concatenate(contents: Sequence[str]) -> str:
    """All sentences in order, each ending with punctuation, exact duplicates (ignoring case/punctuation) dropped."""
    seen, out = set(), []
    for sentence in (s for content in contents for s in sentences(content)):
        key = _normalised(sentence)
        if key and key not in seen:
            seen.add(key)
            out.append(_terminated(sentence))
    return " ".join(out)


def concatenate_memories(memories: Sequence[MemoryRecord]) -> str:
    """`concatenate` of memories, losing no date: each one's relative time anchored to its own day, and,
    when they were said on different days, each led by its day ("(7 May 2023) Caroline ..."). A merge of
    several days carries no single date, so a fact's date survives only in its text (merge_memory's
    default text, and the heuristic's digest)."""
    days = [memory_day(m) for m in memories]
    texts = [anchored(m) for m in memories]
    if len(set(days)) > 1:
        texts = [f"({format_day(day)}) {text}" if day else text for day, text in zip(days, texts, strict=True)]
    return concatenate(texts)


def extract_common(contents: Sequence[str]) -> str | None:
    """The facts at least two memories share: each sentence with a similar one (Jaccard >= 0.5) in another
    memory, once, as its longest variant, in order of appearance. None when they share nothing."""
    memories = [[(s, content_words(s)) for s in sentences(c)] for c in contents]
    common = [
        (s, words)
        for i, memory in enumerate(memories)
        for s, words in memory
        if any(
            jaccard(words, w) >= COMMON_JACCARD
            for j, other in enumerate(memories)
            if j != i
            for _, w in other
        )
    ]
    kept = _collapse(common, COMMON_JACCARD)
    return " ".join(_terminated(s) for s, _ in kept) or None


def summarize(contents: Sequence[str], max_words: int = 60) -> str:
    """An extract of at most ``max_words`` words (but always one sentence): near-duplicate sentences
    (Jaccard >= 0.6) collapsed into their longest variant, then the sentences sharing the most content
    words with the others kept, in their original order."""
    pool = _collapse([(s, content_words(s)) for c in contents for s in sentences(c)], DUPLICATE_JACCARD)
    if not pool:
        return ""

    def centrality(i: int) -> int:
        others = set().union(*(w for j, (_, w) in enumerate(pool) if j != i))
        return len(pool[i][1] & others)

    chosen, words = [], 0
    for i in sorted(range(len(pool)), key=lambda i: (-centrality(i), i)):
        length = len(pool[i][0].split())
        if not chosen or words + length <= max_words:
            chosen.append(i)
            words += length
    return " ".join(_terminated(pool[i][0]) for i in sorted(chosen))


# ---------------------------------------------------------------- splitting


def split_thematic(content: str) -> list[str]:
    """Split a packed fact into one part per topic.

    Cuts at sentences and at clause joints ("; ", ", and ", " and also ", " but ", ", while "...) where both
    sides have a verb: "Nadia has a cat named Pickle and is allergic to shellfish" splits, "cats and dogs"
    does not. Adjacent clauses sharing content words (Jaccard >= 0.25) stay together. Parts get a subject
    from their sentence's first name ("is allergic ..." -> "Nadia is allergic ...", "his band" -> "Owen's
    band") and end with a period. Every content word of ``content`` is in some part.
    """
    groups: list[list[Unit]] = []
    for unit in _units(content):
        names = content_words(unit[2][0] or "") if unit[2] else set()  # the shared subject says nothing
        previous = content_words(groups[-1][-1][1]) - names if groups else set()
        if groups and jaccard(previous, content_words(unit[1]) - names) >= TOPIC_JACCARD:
            groups[-1].append(unit)
        else:
            groups.append([unit])
    return _parts(content, groups)


def split_temporal(content: str) -> list[str]:
    """Split so each part holds at most one time expression (``dates.TIME_EXPRESSION``, an anchored
    "yesterday (7 May 2023)" counting once); clauses without one stay with the part before. Best effort:
    a clause naming two times that cannot be cut at a clause joint stays whole."""
    groups: list[list[Unit]] = []
    times = 0
    for unit in _units(content):
        found = sum(1 for _ in TIME_EXPRESSION.finditer(unit[1]))
        if groups and not (found and times):
            groups[-1].append(unit)
            times += found
        else:
            groups.append([unit])
            times = found
    return _parts(content, groups)


def split_speaker(content: str, speakers: Sequence[str]) -> list[str]:
    """One part per speaker: each sentence/clause goes to the speaker it names first (one naming no speaker
    goes with the one before it), parts in order of first appearance."""
    patterns = [(s, re.compile(rf"\b{re.escape(s)}\b")) for s in speakers if s.strip()]
    owners: list[str | None] = []
    for _, text, _ in (units := _units(content)):
        hits = [(m.start(), s) for s, p in patterns if (m := p.search(text))]
        owners.append(min(hits)[1] if hits else owners[-1] if owners else None)
    first = next((o for o in owners if o), None)
    owners = [o or first for o in owners]  # leading clauses naming nobody go with the first speaker named
    if len(set(owners)) < 2:
        return [content]
    runs: dict[str | None, list[str]] = {}
    start = 0
    for i in range(1, len(units) + 1):
        if i == len(units) or owners[i] != owners[start]:
            subject = (owners[start], owners[start]) if owners[start] else None
            runs.setdefault(owners[start], []).append(
                _finish(_joined(units[start:i]), subject, repair=start > 0)
            )
            start = i
    return [" ".join(texts) for texts in runs.values()]


# ---------------------------------------------------------------- helpers


def _is_abbreviation(before: str) -> bool:
    """Whether the word ending in the period at the end of ``before`` is an abbreviation or an initial."""
    token = before.split()[-1].lstrip("(\"'“‘")
    # "U.S.", "e.g.", "a.m." and initials like "J." (but not "I.") never end a sentence here
    return token.lower() in _ABBREVIATIONS or bool(re.fullmatch(r"(?:[A-Za-z]\.){2,}|[A-HJ-Z]\.", token))


def _normalised(sentence: str) -> str:
    return " ".join(re.findall(r"\w+", sentence.lower()))


def _terminated(sentence: str) -> str:
    sentence = sentence.strip().rstrip(",;:").rstrip()
    return sentence if re.search(r"[.!?][\"'”’)\]]*$", sentence) else sentence + "."


def _collapse(items: list[tuple[str, set[str]]], threshold: float) -> list[tuple[str, set[str]]]:
    """Items grouped with their near-duplicates (Jaccard >= threshold with any member), each group given
    as its longest text, at the place of its first member."""
    groups: list[list[tuple[str, set[str]]]] = []
    for text, words in items:
        group = next((g for g in groups if any(jaccard(words, w) >= threshold for _, w in g)), None)
        if group is None:
            groups.append([(text, words)])
        else:
            group.append((text, words))
    return [max(g, key=lambda item: len(item[0])) for g in groups]


def _is_verb(word: str) -> bool:
    """A finite verb: auxiliary, a listed verb form, or a past tense guessed from "-ed"."""
    word = word.lower()
    return word in AUXILIARIES or word in FINITE_VERBS or (len(word) > 4 and word.endswith("ed"))


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9][\w'’-]*", text)


def _start(clause: str) -> str | None:
    """How a clause starts: "subject" (a name, pronoun or short noun phrase, then a finite verb), "verb" (a
    finite verb phrase without subject), or None (e.g. the rest of a list: "dogs in the house")."""
    tokens = [t for t in clause.split() if t.lower() not in ADVERBS]
    words = [w for w in _words(clause) if w.lower() not in ADVERBS]
    if len(words) < 2:
        return None  # a lone word ("and plans.") is the end of a list
    first = words[0].lower()
    if first in _BASE_FORMS or tokens[0][-1] in ",;:":
        return None  # "competitions and shows, winning ...": a noun in a list
    if first in AUXILIARIES or first in FINITE_VERBS:
        return "verb"
    if first.endswith("ed") and words[1].lower() in _OBJECT_STARTS:
        return "verb"  # "adopted a dog", not "talented musicians"
    if first in _SUBJECT_PRONOUNS:
        return "subject" if _is_verb(words[1]) else None
    if first in _DETERMINERS or (words[0][0].isupper() and first not in STOPWORDS):
        for word in words[1:4]:  # "his favorite band is", "Mara is"; not "Game of Thrones and could"
            if word.lower() in AUXILIARIES or word.lower() in FINITE_VERBS:
                return "subject"
            if word.lower() in STOPWORDS:
                return None
    return None


def _subject(clause: str) -> tuple[str | None, str] | None:
    """(name, phrase) of a sentence's first clause: "Owen's sister Mara is ..." -> ("Owen", "Owen's sister
    Mara"), "This trip gave John ..." -> ("John", "This trip"); the phrase is what stands before the first
    verb when that is a name or starts with a determiner, else the name. None if neither is found."""
    name = None
    for run in re.findall(r"\b[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*", clause):
        words = run.split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        if words:
            name = " ".join(words)
            break
    tokens = [t for t in clause.split() if t.lower() not in ADVERBS]
    verb = next((k for k, t in enumerate(tokens[1:6], 1) if _is_verb(t.strip(",;"))), None)
    phrase = name
    if verb and ((name and clause.startswith(name)) or tokens[0].lower() in _DETERMINERS):
        phrase = " ".join(tokens[:verb]).rstrip(",")
    return (name, phrase) if phrase else None


def _units(content: str) -> list[Unit]:
    """Sentences cut at clause joints where both sides have a verb, with the separator before each."""
    units: list[Unit] = []
    fallback = None
    for sentence in sentences(content):
        clauses, start, sep = [], 0, " " if units else ""
        for m in _CLAUSE_SEP.finditer(sentence):
            left, right = sentence[start : m.start()], sentence[m.end() :]
            kind = _start(right)
            if kind == "verb" and _SUBORDINATORS & {w.lower() for w in _words(left)}:
                continue  # "people who accept and support her": the verb belongs to the subordinate clause
            left_words = _words(left)
            # both sides need a verb, and the left one its object: not "Gina supports and encourages Jon"
            if (
                kind
                and left_words
                and any(map(_is_verb, left_words))
                and not _is_verb(left_words[-1])
                and left_words[-1].lower() not in _DANGLING  # "..., but he and his family are"
            ):
                clauses.append((sep, left))
                sep, start = m.group(), m.end()
        clauses.append((sep, sentence[start:]))
        opening = clauses[0][1].split()[0].lower()
        # a sentence opening with a pronoun ("She withdrew from the Riverside Half Marathon") is about the
        # memory's first subject, usually its speaker
        subject = (None if opening in _PRONOUNS else _subject(clauses[0][1])) or fallback
        fallback = fallback or subject
        units += [(s, text, subject) for s, text in clauses]
    return units


def _joined(units: Sequence[Unit]) -> str:
    """The clauses with their separators, except the first one's (the joint the part was cut at)."""
    return (units[0][1] + "".join(sep + text for sep, text, _ in units[1:])).strip()


def _parts(content: str, groups: list[list[Unit]]) -> list[str]:
    if len(groups) < 2:
        return [content]
    return [_finish(_joined(g), g[0][2], repair=k > 0) for k, g in enumerate(groups)]


def _finish(text: str, subject: tuple[str | None, str] | None, repair: bool) -> str:
    """A standalone part: subject restored (when ``repair``), capitalised, ending with punctuation."""
    if repair and subject:
        text = _with_subject(text, *subject)
    return _terminated(text[:1].upper() + text[1:])


def _with_subject(clause: str, name: str | None, phrase: str) -> str:
    """Give a clause its subject: "is learning ..." -> "Owen is learning ...", "she runs" -> "Nadia runs",
    "his band" -> "Owen's band" (the phrase when it ends with a name: "Owen's sister Mara"); else unchanged."""
    person = phrase if phrase.split()[-1][:1].isupper() else name
    pronoun = re.match(rf"((?:(?:{'|'.join(ADVERBS)})\s+)*)(he|she|his|her)\b", clause, re.IGNORECASE)
    if person and pronoun:  # "now she feels" -> "now Joanna feels"
        owner = "'s" if pronoun[2].lower() in ("his", "her") else ""
        return pronoun[1] + person + owner + clause[pronoun.end() :]
    if _start(clause) == "verb":
        return f"{phrase} {clause[:1].lower()}{clause[1:]}"
    return clause


def article(noun: str) -> str:
    """`a merge`, `an update`: a noun with its indefinite article (by its first letter)."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
