"""A LoCoMo conversation as typed, read-only records: its sessions, turns and facts (its questions are
`scoring/questions.py`'s `QAItem`), and the session dates they carry.

    conversation.session(3).date          # datetime.date(2023, 5, 8)
    conversation.turn("D3:7").text
    fact.session_day                      # the day a fact's relative times ("yesterday") refer to
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

from memupdate.scoring.questions import QAItem
from memupdate.text.dates import MONTHS

_DATE = re.compile(r"(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})")
# Month names and the abbreviations LoCoMo writes ("Jan", "Sept").
_MONTHS = {form: number for number, name in enumerate(MONTHS, start=1) for form in (name.lower(), name[:3].lower())}
_MONTHS["sept"] = 9


def parse_session_date(date_time: str) -> datetime.date | None:
    """The calendar date in a LoCoMo timestamp such as ``"1:56 pm on 8 May, 2023"``, or None if unparseable."""
    # Month names are matched by hand so parsing does not depend on the process locale (strptime's %B does).
    match = _DATE.search(date_time or "")
    if match is None:
        return None
    day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        return None
    try:
        return datetime.date(int(year), month, int(day))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance. ``dia_id`` ("D3:7" = session 3, turn 7) is what QA evidence and facts point at."""

    speaker: str
    dia_id: str
    text: str
    session: int
    blip_caption: str | None = None  # caption of a shared image; the text alone may not mention it


@dataclass(frozen=True, slots=True)
class Session:
    """One dated chat session. ``date_time`` is the raw string; ``date`` its parsed day (None if unparseable)."""

    number: int
    date_time: str
    date: datetime.date | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Fact:
    """One observation: a memory-bank entry extracted from a session.

    ``text`` may use relative time ("yesterday", "next month") that only ``session_date`` (the raw
    ``date_time`` of the session it came from; "" if the file has none) anchors.
    """

    text: str
    dia_ids: tuple[str, ...]
    session: int
    session_date: str
    speaker: str

    @property
    def session_day(self) -> datetime.date | None:
        """The parsed day of ``session_date``."""
        return parse_session_date(self.session_date)


@dataclass(frozen=True, slots=True)
class Conversation:
    """One LoCoMo sample: two speakers, their sessions (ascending), facts (file order) and QA (file order)."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    facts: tuple[Fact, ...]
    qa: tuple[QAItem, ...]
    session_summaries: dict[int, str] = field(default_factory=dict)

    @property
    def turns(self) -> tuple[Turn, ...]:
        """All turns of all sessions, in order."""
        return tuple(turn for session in self.sessions for turn in session.turns)

    def session(self, number: int) -> Session:
        """The session with this number; KeyError if there is none."""
        for session in self.sessions:
            if session.number == number:
                return session
        raise KeyError(f"{self.sample_id} has no session {number}")

    def turn(self, dia_id: str) -> Turn:
        """The turn with this dia_id ("D3:7"); KeyError if there is none."""
        for turn in self.turns:
            if turn.dia_id == dia_id:
                return turn
        raise KeyError(f"{self.sample_id} has no turn {dia_id}")
