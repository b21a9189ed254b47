"""Find time expressions in memory text and anchor the relative ones to absolute dates.

A LoCoMo memory is written on its session day, so "yesterday" only means something next to that day.
This module turns such expressions into dates in the style of LoCoMo's answers::

    >>> from datetime import date
    >>> day = date(2023, 5, 8)  # a Monday
    >>> anchor_relative_dates("Caroline went to the support group yesterday.", day)
    'Caroline went to the support group yesterday (7 May 2023).'
    >>> resolve_relative("two weekends ago", day)
    'the weekend of 29-30 April 2023'
    >>> resolve_relative("last week", day)
    'the week before 8 May 2023'
    >>> resolve_relative("3 years ago", day)
    '2020'
    >>> has_relative_time("Caroline went to the support group yesterday (7 May 2023).")
    False

``TIME_EXPRESSION`` matches both relative ("last Friday", "a few weeks ago") and absolute ("in May",
"8 May 2023", "2019") expressions; ``strategies.split_temporal`` uses it to cut text by time.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memupdate.store import MemoryRecord

__all__ = [
    "TIME_EXPRESSION",
    "anchor_relative_dates",
    "anchored",
    "datable",
    "format_day",
    "has_relative_time",
    "memory_day",
    "resolve_relative",
]

MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
APPROXIMATE = {"a couple": 2, "a couple of": 2, "a few": 3, "few": 3, "several": 3}

_MONTH = "(?-i:" + "|".join(MONTHS) + ")"  # case-sensitive: "this May" is a month, "this may help" is not
_YEAR = r"(?:19\d\d|20[0-3]\d)(?!\d)"  # not "Cyberpunk 2077"
_DAY_NUM = r"\d{1,2}(?:st|nd|rd|th)?"
_NUM = "|".join([r"\d+", *NUMBER_WORDS, r"a\s+few", r"a\s+couple(?:\s+of)?", "several", "few"])
_PAST = r"last|(?:this|the)\s+past|past"

# Relative expressions; the group names tell resolve_relative what matched.
_REL = rf"""(?i:
    (?P<dby>the\s+day\s+before\s+yesterday)
  | (?P<dat>the\s+day\s+after\s+tomorrow)
  | (?P<yday>yesterday|last\s+night)
  | (?P<today>today|tonight|this\s+(?:morning|afternoon|evening)|earlier\s+today)
  | (?P<tmrw>tomorrow)
  | (?P<ago>(?P<num>{_NUM})\s+(?P<unit>day|week|weekend|month|year)s?\s+ago)
  | (?P<wkend>(?P<wkw>last|(?:this|the)\s+past|this\s+coming|this|next|coming)\s+weekend
             |(?P<wkon>on|over|during)\s+the\s+weekend)
  | (?P<span>(?P<spw>{_PAST}|this|next)\s+(?P<spu>week|month|year))
  | (?P<season>(?P<sw>{_PAST}|this|next)\s+(?P<sn>spring|summer|fall|autumn|winter))
  | (?P<mon>(?P<mw>last|this|next)\s+(?P<mn>{_MONTH}))
  | (?P<wday>(?:(?P<dw>{_PAST}|this\s+coming|this|next|coming|on)\s+)?(?<!\ba\s)(?<!\bevery\s)(?<!\beach\s)
             (?P<dn>{"|".join(WEEKDAYS)})
             (?!s)(?!,?\s+(?:{_DAY_NUM}\s+(?:of\s+)?{_MONTH}|{_MONTH}\s+\d)))  # "Monday, 8 May" is absolute
)\b"""

_ABS = rf"""(?:
    {_DAY_NUM}(?:\s*-\s*{_DAY_NUM})?\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?
  | {_MONTH}\s+{_DAY_NUM}\b(?:,?\s+{_YEAR})?
  | {_MONTH},?\s+{_YEAR}
  | (?i:(?:in|since|until|by|during|early|late|before|after)\s+|mid-){_MONTH}\b(?:,?\s+{_YEAR})?
  | (?-i:January|February|March|April|June|July|August|September|October|November|December)\b
  | (?i:spring|summer|fall|autumn|winter)(?:\s+of)?\s+{_YEAR}(?:-{_YEAR})?
  | {_YEAR}
)"""

# An anchor is a parenthesis with a digit right after a relative expression: "yesterday (7 May 2023)".
TIME_EXPRESSION = re.compile(
    rf"\b(?:(?P<rel>{_REL})(?P<anchor>\s*\((?=[^()]*\d)[^()]*\))?|(?P<abs>{_ABS}))", re.VERBOSE
)
"""Relative or absolute time expression. Groups: ``rel`` (with ``anchor``, its existing parenthesised
date if any) or ``abs``."""

_REL_ONLY = re.compile(_REL, re.VERBOSE)
_FUTURE_CUE = re.compile(
    r"\b(?:will|'ll|going\s+to|plans?|planning|planned|intends?|upcoming|until|looking\s+forward|excited\s+to|"
    r"hopes?\s+to|wants?\s+to|scheduled|about\s+to|starts|agreed\s+to|suggest\w*|propos\w*|arrang\w*|"
    r"invit\w*|offer\w*\s+to|would|could|should)\b",
    re.IGNORECASE,
)


def memory_day(memory: MemoryRecord) -> date | None:
    """The day a memory was said on (its `date` metadata), None when it has none or a bad one."""
    value = memory.metadata.get("date")
    try:
        return date.fromisoformat(value) if value else None
    except ValueError:
        return None


def anchored(memory: MemoryRecord) -> str:
    """The memory's text with relative time anchored to its day (unchanged when it has no date)."""
    day = memory_day(memory)
    return anchor_relative_dates(memory.content, day) if day else memory.content


def datable(memory: MemoryRecord) -> bool:
    """Whether anchoring would change the memory (it has relative time, and a day): what an update without
    content does, what the tools mark and what the heuristic dates."""
    return anchored(memory) != memory.content


def format_day(day: date) -> str:
    """``date(2023, 5, 7)`` -> ``"7 May 2023"`` (LoCoMo's answer style)."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def resolve_relative(expression: str, session_day: date, *, future: bool = False) -> str | None:
    """The absolute date a relative time expression means when said on ``session_day``; None if not relative.

    "yesterday" -> "7 May 2023"; "last week" -> "the week before 8 May 2023"; "last weekend" ->
    "the weekend of 6-7 May 2023"; "last Saturday" / "next Tuesday" -> that day; "2 days ago" -> the day,
    "a few days ago" / "two weeks ago" -> "around <day>"; "3 months ago" -> "around February 2023";
    "3 years ago" / "last year" -> "2020" / "2022"; "last month" -> "April 2023"; "last summer" -> "summer 2022".
    A bare weekday ("on Friday") or "over the weekend" is taken as the last one before the session day,
    or the next one after it when ``future`` is true (the sentence talks about plans).
    """
    m = _REL_ONLY.fullmatch(" ".join(expression.split()))
    if not m:
        return None
    day = session_day
    for name, offset in (("dby", -2), ("dat", 2), ("yday", -1), ("today", 0), ("tmrw", 1)):
        if m[name]:
            return format_day(day + timedelta(days=offset))
    if m["ago"]:
        return _ago(m["num"].lower(), m["unit"].lower(), day)
    if m["wkend"]:
        which = " ".join((m["wkw"] or "").lower().split())
        return "the weekend of " + _weekend(_weekend_saturday(which, bool(m["wkon"]), future, day))
    if m["span"]:
        step = _step(m["spw"])
        if m["spu"].lower() == "week":
            return f"the week {('before', 'of', 'after')[step + 1]} {format_day(day)}"
        if m["spu"].lower() == "month":
            return _month_name(*_add_months(day, step))
        return str(day.year + step)
    if m["season"]:
        return _season(m["sn"].lower(), _step(m["sw"]), day)
    if m["mon"]:
        month = MONTHS.index(m["mn"]) + 1
        step = _step(m["mw"])
        year = day.year - (month >= day.month) if step < 0 else day.year + (step > 0 and month <= day.month)
        return _month_name(year, month)
    # a weekday
    target = WEEKDAYS.index(m["dn"].lower())
    which = " ".join((m["dw"] or "").lower().split())
    back = (day.weekday() - target) % 7 or 7  # days since the last such weekday before today
    ahead = (target - day.weekday()) % 7  # days to the next such weekday, 0 if today
    if which in ("this", "this coming", "coming"):
        return format_day(day + timedelta(days=ahead))
    if which == "next" or (which in ("", "on") and future):
        return format_day(day + timedelta(days=ahead or 7))
    return format_day(day - timedelta(days=back))


def anchor_relative_dates(text: str, session_day: date) -> str:
    """``text`` with each relative time expression followed by its date in parentheses.

    "went to the group yesterday" -> "went to the group yesterday (7 May 2023)". Expressions already
    followed by a dated parenthesis are left alone, so anchoring twice changes nothing; text without
    relative time comes back unchanged.
    """
    out, last = [], 0
    for m in TIME_EXPRESSION.finditer(text):
        if not m["rel"] or m["anchor"]:
            continue
        resolved = resolve_relative(m["rel"], session_day, future=_is_future(text, m.start(), m.end()))
        if resolved:
            out += [text[last : m.end("rel")], f" ({resolved})"]
            last = m.end("rel")
    return "".join(out) + text[last:] if out else text


def has_relative_time(text: str) -> bool:
    """Whether ``text`` has a relative time expression not yet anchored (anchoring would change it)."""
    return any(m["rel"] and not m["anchor"] for m in TIME_EXPRESSION.finditer(text))


def _is_future(text: str, start: int, end: int) -> bool:
    """Whether the sentence around ``text[start:end]`` talks about plans (decides "on Friday")."""
    begin = max(text.rfind(p, 0, start) for p in ".!?;") + 1
    stops = [i for i in (text.find(p, end) for p in ".!?;") if i >= 0]
    return bool(_FUTURE_CUE.search(text[begin : min(stops, default=len(text))]))


def _ago(num: str, unit: str, day: date) -> str:
    """ "<num> <unit>s ago": a day, "around" a day or month, a weekend or a year; approximate counts say "around"."""
    num = " ".join(num.split())
    approximate = num in APPROXIMATE
    n = APPROXIMATE.get(num) or NUMBER_WORDS.get(num) or int(num)
    around = "around " if approximate else ""
    if unit == "day":
        return around + format_day(day - timedelta(days=n))
    if unit == "week":
        return "around " + format_day(day - timedelta(weeks=n))
    if unit == "weekend":
        return "the weekend of " + _weekend(_last_sunday(day) - timedelta(days=1 + 7 * (n - 1)))
    if unit == "month":
        return "around " + _month_name(*_add_months(day, -n))
    return around + str(day.year - n)


def _last_sunday(day: date) -> date:
    """The last Sunday before ``day``: the end of the last weekend wholly past."""
    return day - timedelta(days=(day.weekday() - 6) % 7 or 7)


def _weekend_saturday(which: str, loose: bool, future: bool, day: date) -> date:
    """Saturday of the weekend meant by "<which> weekend" (or "on/over the weekend" when ``loose``)."""
    ahead = (5 - day.weekday()) % 7  # days to the coming Saturday, 0 on a Saturday
    if which in ("next", "coming", "this coming"):
        return day + timedelta(days=ahead or 7)
    if which == "this" or (loose and future):  # the current weekend, or the coming one on weekdays
        return day - timedelta(days=1) if day.weekday() == 6 else day + timedelta(days=ahead)
    if loose and day.weekday() == 6:
        return day - timedelta(days=1)  # "over the weekend" said on a Sunday: this one
    return _last_sunday(day) - timedelta(days=1)  # last / this past weekend


def _step(which: str) -> int:
    """-1 for last/past, 0 for this, +1 for next."""
    which = which.lower()
    return 1 if which == "next" else 0 if which == "this" else -1


def _add_months(day: date, n: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + n
    return index // 12, index % 12 + 1


def _month_name(year: int, month: int) -> str:
    return f"{MONTHS[month - 1]} {year}"


def _weekend(saturday: date) -> str:
    """ "29-30 April 2023", "30 September-1 October 2023" or "31 December 2022-1 January 2023"."""
    sunday = saturday + timedelta(days=1)
    if saturday.year != sunday.year:
        return f"{format_day(saturday)}-{format_day(sunday)}"
    if saturday.month != sunday.month:
        return f"{saturday.day} {MONTHS[saturday.month - 1]}-{format_day(sunday)}"
    return f"{saturday.day}-{format_day(sunday)}"


def _season(name: str, step: int, day: date) -> str:
    """The season named, relative to the one ``day`` is in: "summer 2022", "winter 2022-2023"."""
    start_month = SEASON_START[name]
    # Year of the occurrence that started most recently (winter starting in December of the year before).
    year = day.year if day.month >= start_month else day.year - 1
    current = (day.year * 12 + day.month - 1) - (year * 12 + start_month - 1) < 3  # inside that season now
    if step < 0:
        year -= current
    elif step > 0:
        year += 1
    elif not current:
        year = day.year  # "this summer" said in May or October: the one of this calendar year
    return f"winter {year}-{year + 1}" if name == "winter" else f"{name} {year}"
