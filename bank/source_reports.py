"""What a source kind reports back: an export's items written and left alone (`ExportReport`), a live
bank's changes written to its store (`LiveExport`). Below the registry (`source_kinds.py`) and the kinds
that fill them in, so each side imports them downward.

    from memupdate.bank.source_export import export_bank

    report = export_bank(bank)      # an ExportReport
    report.summary()                # "imported/memories/alice -> postgresql://app@db/app: 1 new and 0 changed items written; ..."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ExportReport:
    """What an export wrote at the source, and what it left alone."""

    bank: str
    target: str
    written_new: list[str] = field(default_factory=list)  # source keys
    written_changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    to_delete: list[str] = field(default_factory=list)  # removed here; deleted at the source only with --apply
    changed_at_source: list[str] = field(default_factory=list)  # moved since the import: left alone
    unchanged: int = 0
    bank_keys: dict[str, str] = field(default_factory=dict, repr=False)  # source key written -> the memory's key

    def summary(self) -> str:
        parts = [
            f"{self.bank} -> {self.target}: {len(self.written_new)} new and {len(self.written_changed)} changed items written",
            f"{len(self.deleted)} deleted" if self.deleted else f"{len(self.to_delete)} removed here (deleted there only with --apply)",
            f"{self.unchanged} unchanged",
        ]
        if self.changed_at_source:
            parts.append(f"{len(self.changed_at_source)} changed at the source since the import, left alone: {few_keys(self.changed_at_source)}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "bank_keys"}


@dataclass
class LiveExport:
    """What one export of a bank's live changes did at the store."""

    bank: str
    written: list[int] = field(default_factory=list)  # change ids written to the store now
    already: list[int] = field(default_factory=list)  # found there (a run killed after the store committed)
    conflicts: dict[int, str] = field(default_factory=dict)  # change id -> the item the app changed
    kept_keys: dict[int, dict[str, str]] = field(default_factory=dict)  # change id -> {merged memory: app key it took}

    def summary(self, *, conflicts: bool = True) -> str:
        """One line; without `conflicts` when the caller says why those were dropped itself."""
        parts = [f"{self.bank}: {len(self.written)} change{'s' if len(self.written) != 1 else ''} written to the store"]
        if self.already:
            parts.append(f"{len(self.already)} found there already")
        kept = [app_key for change in self.written + self.already for app_key in self.kept_keys.get(change, {}).values()]
        if kept:
            parts.append(f"merged item{'s' if len(kept) > 1 else ''} kept the app's key of {'their' if len(kept) > 1 else 'its'} "
                         f"newest source: {', '.join(kept)}")
        if self.conflicts and conflicts:
            first = next(iter(self.conflicts.values()))
            parts.append(f"{len(self.conflicts)} dropped because the app wrote the same items after the change was made ({first})")
        return "; ".join(parts)


def few_keys(keys: Sequence[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")
