"""LoCoMo's file, ``locomo10.json``, read into `Conversation` records (`rl/data/conversation.py`).

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0) is a JSON list of samples. Each sample holds a
multi-session dialogue (``conversation``), per-session facts (``observation``, the initial memory
bank), per-session summaries and the QA pairs used for evaluation. Entry points:

- :func:`load_locomo` reads a file (optionally only some conversations) into :class:`Conversation`.
- :func:`load_sample` reads the small conversation shipped with the package (for ``memupdate demo``).
- :func:`locomo_stats` counts sessions, turns, facts and QA (per category).
- :func:`split_conversations` is the seed's train/test split (first 7 train, rest test).

The data file is never shipped: users pass ``--locomo FILE`` or set ``MEMUPDATE_LOCOMO_FILE``.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from memupdate.rl.data.conversation import Conversation, Fact, Session, Turn, parse_session_date
from memupdate.scoring.categories import CATEGORY_NAMES, category_name
from memupdate.scoring.questions import QAItem

__all__ = [
    "DATASET",
    "LOCOMO_ENV_VAR",
    "LocomoError",
    "default_locomo_path",
    "load_locomo",
    "load_sample",
    "locomo_stats",
    "sample_conversation_path",
    "split_conversations",
]

LOCOMO_ENV_VAR = "MEMUPDATE_LOCOMO_FILE"
# The dataset's name where memupdate labels its data: base namespaces, verl rows' data_source.
DATASET = "locomo"

_NOT_LOCOMO = "this does not look like LoCoMo's locomo10.json"
_HOW_TO_PASS = f"pass --locomo FILE or set {LOCOMO_ENV_VAR} to your copy of locomo10.json"
_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_TIME_KEY = re.compile(r"session_(\d+)_date_time")
_OBSERVATION_KEY = re.compile(r"session_(\d+)_observation")
_SUMMARY_KEY = re.compile(r"session_(\d+)_summary")
# A few evidence ids in the real file are typos like "D:11:26" for "D11:26".
_STRAY_COLON = re.compile(r"D:(\d+):(\d+)")


class LocomoError(ValueError):
    """The LoCoMo file is missing, unreadable or not shaped like ``locomo10.json``; the message says which."""


def default_locomo_path() -> Path | None:
    """The file named by ``MEMUPDATE_LOCOMO_FILE``, or None when the variable is unset or empty."""
    value = os.environ.get(LOCOMO_ENV_VAR, "").strip()
    return Path(value).expanduser() if value else None


def sample_conversation_path() -> Path:
    """Path of the small LoCoMo-format conversation shipped with the package (``sample_id`` "sample-1")."""
    return Path(__file__).resolve().with_name("sample_conversation.json")


def load_sample() -> list[Conversation]:
    """The shipped sample as a one-element list, ready wherever :func:`load_locomo`'s result is expected."""
    return load_locomo(sample_conversation_path())


def load_locomo(path: str | os.PathLike[str], conversations: Sequence[str] | None = None) -> list[Conversation]:
    """Read a LoCoMo JSON file, in file order.

    ``conversations`` keeps only the samples with these ids (a single id string is accepted); file order is
    kept, not the order given.
    Raises :class:`LocomoError` for a missing file, invalid JSON, a file not shaped like
    ``locomo10.json`` (naming the sample and key) or an unknown conversation id (listing the known ones).
    """
    path = Path(path)
    raw = _read_json(path)
    if not isinstance(raw, list):
        raise LocomoError(f"{path}: expected a JSON list of samples, got {type(raw).__name__}; {_NOT_LOCOMO}")
    ids: list[str] = []
    for i, sample in enumerate(raw):
        if not isinstance(sample, dict):
            raise LocomoError(f"{path}: sample {i} is a {type(sample).__name__}, not an object; {_NOT_LOCOMO}")
        for key in ("sample_id", "conversation"):
            if key not in sample:
                raise LocomoError(f"{path}: sample {i} has no {key!r} key; {_NOT_LOCOMO}")
        if not isinstance(sample["conversation"], dict):
            raise LocomoError(f"{path}: sample {i} has a 'conversation' that is not an object; {_NOT_LOCOMO}")
        sample_id = str(sample["sample_id"])
        if sample_id in ids:
            raise LocomoError(f"{path}: sample {i} repeats sample_id {sample_id!r}")
        ids.append(sample_id)

    wanted: set[str] | None = None
    if isinstance(conversations, str):
        conversations = [conversations]  # a lone id would otherwise be iterated character by character
    if conversations is not None:
        wanted = {str(c) for c in conversations}
        unknown = [c for c in dict.fromkeys(str(c) for c in conversations) if c not in ids]
        if unknown:
            raise LocomoError(
                f"unknown conversation id(s) {', '.join(unknown)} in {path}; available: {', '.join(ids)}"
            )
    return [
        _parse_sample(sample, i, path)
        for i, (sample, sample_id) in enumerate(zip(raw, ids, strict=True))
        if wanted is None or sample_id in wanted
    ]


def locomo_stats(conversations: Iterable[Conversation]) -> dict[str, Any]:
    """Counts for a report.

    Returns ``{"conversations", "sessions", "turns", "facts", "qa": int, "qa_by_category": {name: int},
    "per_conversation": [row, ...]}``; each row has ``sample_id``, ``speakers`` and the same counts.
    ``qa_by_category`` lists all five LoCoMo categories (zero if absent) in category order, then any
    unknown ones as ``"category-N"``.
    """
    conversations = list(conversations)
    rows = [_conversation_row(conversation) for conversation in conversations]
    by_category = Counter(item.category for conversation in conversations for item in conversation.qa)
    return {
        "conversations": len(rows),
        "sessions": sum(row["sessions"] for row in rows),
        "turns": sum(row["turns"] for row in rows),
        "facts": sum(row["facts"] for row in rows),
        "qa": sum(row["qa"] for row in rows),
        "qa_by_category": _named_counts(by_category),
        "per_conversation": rows,
    }


def split_conversations(
    conversations: Sequence[Conversation], n_train: int = 7
) -> tuple[list[Conversation], list[Conversation]]:
    """The seed's split: the first ``n_train`` conversations train, the rest test (order as loaded)."""
    if n_train < 0:
        raise ValueError(f"n_train must be >= 0, got {n_train}")
    return list(conversations[:n_train]), list(conversations[n_train:])


# --- parsing -----------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "not found"
        raise LocomoError(f"LoCoMo file {what}: {path}; {_HOW_TO_PASS}")
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise LocomoError(f"{path} is not valid JSON ({exc}); {_NOT_LOCOMO}") from exc
    except UnicodeDecodeError as exc:
        raise LocomoError(f"{path} is not UTF-8 text ({exc}); {_NOT_LOCOMO}") from exc


def _parse_sample(sample: dict[str, Any], index: int, path: Path) -> Conversation:
    where = f"{path}: sample {index} ({sample['sample_id']})"
    conv = sample["conversation"]
    for key in ("speaker_a", "speaker_b"):
        if key not in conv:
            raise LocomoError(f"{where}: 'conversation' has no {key!r} key; {_NOT_LOCOMO}")
    date_times = {
        int(m.group(1)): str(value)
        for key, value in conv.items()
        if (m := _DATE_TIME_KEY.fullmatch(key))
    }
    sessions = []
    # Sessions are keyed "session_N"; some files carry session_N_date_time keys without a session_N list.
    for key, turns in conv.items():
        m = _SESSION_KEY.fullmatch(key)
        if m is None or not isinstance(turns, list):
            continue
        number = int(m.group(1))
        date_time = date_times.get(number, "")
        sessions.append(
            Session(
                number=number,
                date_time=date_time,
                date=parse_session_date(date_time),
                turns=tuple(_parse_turn(turn, number, f"{where} {key}[{j}]") for j, turn in enumerate(turns)),
            )
        )
    sessions.sort(key=lambda s: s.number)
    summaries = sample.get("session_summary")
    return Conversation(
        sample_id=str(sample["sample_id"]),
        speaker_a=str(conv["speaker_a"]),
        speaker_b=str(conv["speaker_b"]),
        sessions=tuple(sessions),
        facts=tuple(_parse_facts(sample.get("observation") or {}, date_times, where)),
        qa=tuple(_parse_qa(item, j, where) for j, item in enumerate(sample.get("qa") or [])),
        session_summaries={
            int(m.group(1)): str(text)
            for key, text in (summaries.items() if isinstance(summaries, dict) else ())
            if (m := _SUMMARY_KEY.fullmatch(key))
        },
    )


def _parse_turn(turn: Any, session: int, where: str) -> Turn:
    if not isinstance(turn, dict) or "dia_id" not in turn or "speaker" not in turn:
        raise LocomoError(f"{where}: a turn must be an object with 'speaker', 'dia_id' and 'text'; {_NOT_LOCOMO}")
    caption = turn.get("blip_caption")
    return Turn(
        speaker=str(turn["speaker"]),
        dia_id=str(turn["dia_id"]),
        text=str(turn.get("text") or ""),
        session=session,
        blip_caption=str(caption) if caption else None,
    )


def _parse_facts(observation: Any, date_times: dict[int, str], where: str) -> list[Fact]:
    if not isinstance(observation, dict):
        raise LocomoError(f"{where}: 'observation' is not an object; {_NOT_LOCOMO}")
    facts = []
    for key, by_speaker in observation.items():
        m = _OBSERVATION_KEY.fullmatch(key)
        if m is None or not isinstance(by_speaker, dict):
            continue
        session = int(m.group(1))
        for speaker, entries in by_speaker.items():
            for j, entry in enumerate(entries or []):
                # Usual shape is [text, "D1:3"]; tolerate [text, [ids...]], [text, id, id], nesting, bare text.
                if isinstance(entry, str):
                    text, ids = entry, ()
                elif isinstance(entry, list | tuple) and entry and isinstance(entry[0], str):
                    text, ids = entry[0], _dia_ids(entry[1:])
                else:
                    raise LocomoError(
                        f"{where} observation {key}[{speaker!r}][{j}]: expected [fact, dia_id], got {entry!r}"
                    )
                facts.append(
                    Fact(
                        text=text.strip(),
                        dia_ids=ids,
                        session=session,
                        session_date=date_times.get(session, ""),
                        speaker=str(speaker),
                    )
                )
    return facts


def _parse_qa(item: Any, index: int, where: str) -> QAItem:
    if not isinstance(item, dict) or "question" not in item or "category" not in item:
        raise LocomoError(f"{where} qa[{index}]: expected an object with 'question' and 'category'; {_NOT_LOCOMO}")
    try:
        category = int(item["category"])
    except (TypeError, ValueError) as exc:
        raise LocomoError(f"{where} qa[{index}]: category {item['category']!r} is not an integer") from exc
    return QAItem(
        index=index,
        question=str(item["question"]),
        answer=_optional_str(item.get("answer")),
        adversarial_answer=_optional_str(item.get("adversarial_answer")),
        evidence=_dia_ids(item.get("evidence") or ()),
        category=category,
    )


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _dia_ids(value: Any) -> tuple[str, ...]:
    """Flatten nested lists and "D1:2, D1:4" / "D1:2; D1:4" strings into unique ids, in order."""
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif v is not None:
            for part in re.split(r"[,;\s]+", str(v)):
                # Skip digit-less debris such as the lone "D" in one real evidence list.
                if any(ch.isdigit() for ch in part):
                    found.append(_STRAY_COLON.sub(r"D\1:\2", part))

    walk(value)
    return tuple(dict.fromkeys(found))


def _conversation_row(conversation: Conversation) -> dict[str, Any]:
    return {
        "sample_id": conversation.sample_id,
        "speakers": f"{conversation.speaker_a} & {conversation.speaker_b}",
        "sessions": len(conversation.sessions),
        "turns": sum(len(session.turns) for session in conversation.sessions),
        "facts": len(conversation.facts),
        "qa": len(conversation.qa),
        "qa_by_category": _named_counts(Counter(item.category for item in conversation.qa)),
    }


def _named_counts(by_number: Counter[int]) -> dict[str, int]:
    numbers = list(CATEGORY_NAMES) + sorted(set(by_number) - set(CATEGORY_NAMES))
    return {category_name(n): by_number.get(n, 0) for n in numbers}
