"""Compaction that runs beside a live app: banks that need work are compacted, the safe changes apply
themselves, the rest wait for review, and nothing the app writes meanwhile is lost.

    from memupdate.agent.background import BackgroundCompactor, CompactorSettings
    from memupdate.store import MemoryStore

    root = MemoryStore.connect(("memupdate",))
    compactor = BackgroundCompactor(root, "postgresql://app@db:5432/app", CompactorSettings(prefix=("memories",)))
    compactor.run_once()            # one pass: [BankPass(bank="imported/memories/alice", applied=[41], queued=[42]), ...]
    with BackgroundCompactor(root, "app/memories", CompactorSettings(interval=300)):   # a bank path of memupdate's own database
        serve_my_app()              # a pass every 5 minutes in a thread; `compactor.wake()` runs one now

SOURCE is a LangGraph `PostgresStore` URL (LangMem's usual store) or a path of memupdate's own
database (a bank, or the banks under it, written through `PostgresMemoryStore` or `MemoryStore`).
A pass, bank by bank:

1. *Live store only:* write the bank's changes the store has not had yet (`bank.live_sync`: a run
   killed after applying resumes here), then import what the app wrote since, mirroring deletions.
2. Does the bank need work? Never compacted, grown by `grow_by` memories since its last compaction,
   or a memory created since that the relation judge reads as a duplicate or an update of one of its
   nearest live memories (pairs meet when they are written). Else it is left alone, marked `judged`
   through its newest memory: a later pass reads only memories newer than that (an unchanged bank
   loads no judge).
3. Compact it (`compact_bank`, any policy) into a fork, review the fork (`build_review`), and queue
   each change of the review as its own proposed change (`bank.review_queue`); changes the app's
   writes made (keys the compaction never touched) and changes already pending or rejected are left out.
4. The safety rule (`SafetyRule`) picks the changes that apply themselves; each applies alone,
   checked against the bank as it is then, so a memory the app wrote meanwhile refuses only its own
   change (dropped: a later pass may propose it anew). The rest wait: `memupdate review`.
5. *Live store only:* write the applied changes to the store, each whole or not at all, never over
   an item the app changed meanwhile (such a change is undone in the bank instead).

Several workers (`memupdate watch` processes against one database, on one machine or many) share a
pass: each bank is claimed by one worker while it does steps 2-5 (`bank.claims`: a row lock, `SKIP
LOCKED`; CLAIM_BATCH banks at a time, each batch's pairs judged at once), a bank another worker holds is
skipped (it is being done), and one another worker compacted since this pass read it is left alone. A live
store's batch is claimed whole before its import: steps 1-5 of a bank are one worker's, and workers import
side by side.
A worker killed mid-bank holds nothing (PostgreSQL ends its transaction with its connection) and
leaves nothing half done: each change applies in one transaction or not at all, a safe change it
proposed but did not apply is applied by the next pass, and a bank it did not mark compacted is
compacted again by the next pass (a change it already proposed is not proposed twice).

Every applied change keeps the rows it replaced (`superseded_memories`); `memupdate undo` reverts it,
and on a live store the next export (or `memupdate undo`'s own) puts the items back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memupdate.agent.policies import JudgingPolicy
from memupdate.agent.safety import SafetyRule
from memupdate.bank.change_log import (
    ChangeConflict,
    ChangeRecord,
    apply_change,
    banks_with_proposed,
    discard_change,
    history,
    next_change_id,
    proposed_forks,
    written_by_a_change,
)
from memupdate.bank.claims import claim, claim_many
from memupdate.bank.live_sync import LiveExport, export_changes
from memupdate.bank.namespaces import COMPACTION_LABEL, compaction_namespace
from memupdate.bank.review_queue import known_signatures, propose_parts, shrink_fork, signature
from memupdate.bank.source_kinds import live_kind
from memupdate.errors import MemupdateError
from memupdate.judge import RelationJudge, judge_memories
from memupdate.judge.judges import make_judge
from memupdate.judge.verdict import RememberingJudge
from memupdate.store import (
    MemoryNotFound,
    MemoryStore,
    Namespace,
    NewEvent,
    SinceLast,
    latest_marks,
    namespaces_labelled,
    since_last,
    to_namespace,
)

# The event row that marks a bank compacted by the watcher (memory_key none, after: what it did).
COMPACTED_OP = "compacted"
# The event row that marks a bank's new memories read by the judge and left (after: `through`, the last
# create event read; `judge`, its name): a pass judges only the memories created after it.
JUDGED_OP = "judged"
WATCH_EPISODE = "watch"
DEFAULT_GROW_BY = 20
DEFAULT_INTERVAL = 60.0  # seconds between the watcher's passes
# New texts embedded at a time before an import (within the embedder's cache of 20,000 vectors).
EMBED_BATCH = 5000
# Banks with work a worker claims at a time, their pairs judged in one batch (`claim_batches`). The judge reads
# fastest in large batches: 1,000 x 20 took 71-76 s judged in one batch, 92-99 s in batches of 64 banks and
# 96-101 s in halving batches (the judge's time 33 s against 51-52 s). A pass with fewer than twice this many
# is cut in two halves (of at least MIN_CLAIM_BATCH), so that two workers started together share it.
CLAIM_BATCH = 500
MIN_CLAIM_BATCH = 50
# A fork no proposed change names and nobody wrote for this long is a killed run's leftover.
ORPHAN_FORK_AGE = timedelta(minutes=15)

if TYPE_CHECKING:  # langchain_core's chat models import langsmith's tracers (0.5 s a `watch --once` command)
    from langchain_core.language_models import BaseChatModel


@dataclass
class BankPass:
    """What one pass did to one bank."""

    bank: str
    reason: str | None = None  # why it needed work; None: it did not
    applied: list[int] = field(default_factory=list)  # change ids applied by the safety rule
    queued: list[int] = field(default_factory=list)  # change ids waiting for review
    dropped: dict[int, str] = field(default_factory=dict)  # change id -> the app's write that refused it
    known: int = 0  # changes left out: already pending, rejected or undone
    imported: str | None = None  # the import's summary (live store)
    from_app: str = ""  # what the import brought from the app, in a phrase ("" for nothing)
    made: list[int] = field(default_factory=list)  # change ids this pass proposed (the others: an earlier pass's)
    export: LiveExport | None = None
    elsewhere: str | None = None  # why another worker's (held by it now, or compacted by it during this pass)
    seconds: float = 0.0

    def summary(self) -> str:
        parts = [self.from_app] if self.from_app else []
        if self.elsewhere is not None:
            parts.append(self.elsewhere)
        elif self.reason is None:
            parts.append("nothing to compact")
        else:
            parts.append(f"{self.reason}; {_count(len(self.applied), 'change')} applied, {len(self.queued)} queued for review"
                         + (f", {self.known} already pending, rejected or undone" if self.known else ""))
        # A change an earlier pass made but a kill kept from the store meets the app's later writes: not "meanwhile".
        earlier = [i for i in self.dropped if i not in self.made]
        if now := [i for i in self.dropped if i not in earlier]:
            parts.append(f"{_count(len(now), 'change')} dropped: the app wrote their memories meanwhile")
        if earlier:
            parts.append(f"{_count(len(earlier), 'change')} left by an earlier, interrupted pass dropped: the app "
                         "wrote their memories after that pass")
        if self.export is not None and (self.export.written or self.export.already):
            parts.append(self.export.summary(conflicts=False).split(": ", 1)[1])
        return f"{self.bank}: " + "; ".join(parts) + f" ({self.seconds:.1f} s)"


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


@dataclass(frozen=True)
class CompactorSettings:
    """What a `BackgroundCompactor` does, each default defined here once (`memupdate watch` builds one
    from its options)."""

    prefix: tuple[str, ...] = ()  # a live store: the app's namespaces watched (those under this prefix)
    into: Namespace | None = None  # a live store: where its banks are kept (None: the import's default)
    policy: str | BaseChatModel = "heuristic"  # a name (heuristic, openai, hf; see `model`...) or a chat model
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    rule: SafetyRule = field(default_factory=SafetyRule)  # which changes apply themselves
    grow_by: int = DEFAULT_GROW_BY  # compacted again once grown by this many memories
    size: int | None = None  # memories per episode (None: the compaction's DEFAULT_NEIGHBOURHOOD)
    interval: float = DEFAULT_INTERVAL  # seconds between passes in the background thread
    # A bank's questions for the QA check (none by default): a change lowering their QA proxy waits.
    questions: Callable[[MemoryStore], Sequence[Any]] | None = None
    skip_labels: tuple[str, ...] = (COMPACTION_LABEL,)  # a path source: namespaces under these labels are no banks

    def __post_init__(self) -> None:
        if self.grow_by < 1:
            raise MemupdateError(f"grow_by={self.grow_by}: a bank must grow by at least 1 memory to be compacted again")


class BackgroundCompactor:
    """Keeps the banks of `source` compact (see the module docstring) as `settings` say; `on_step(step,
    bank)` is called before each step (tests kill the process there), `on_progress(done, total)` after
    each bank of a pass."""

    def __init__(
        self, root: MemoryStore, source: str, settings: CompactorSettings | None = None, *,
        on_step: Callable[[str, str], None] | None = None, on_progress: Callable[[int, int], None] | None = None,
    ):
        self.root, self.source = root, source
        self.settings = settings or CompactorSettings()
        self.kind = live_kind(source)  # an app's store kept in step, else a path of memupdate's own banks
        self.live = self.kind is not None
        self.path = None if self.live else to_namespace(source)
        self.on_step, self.on_progress = on_step, on_progress
        policy = self.settings.policy
        self._policy: BaseChatModel | None = None if isinstance(policy, str) else policy
        self._remembering: RememberingJudge | None = None  # the heuristic's judge, made before it (`_trigger_judge`)
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last: list[BankPass] = []
        self.errors: list[str] = []

    # -- the loop ------------------------------------------------------------------------------------

    def start(self) -> BackgroundCompactor:
        """Run a pass now and then every `interval` seconds, in a daemon thread, until `stop()`."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="memupdate-compactor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the bank being compacted now (nothing is left half applied either way)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        """Run the next pass now (e.g. after a conversation), not at the end of the interval."""
        self._wake.set()

    def __enter__(self) -> BackgroundCompactor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.last = self.run_once()
            except Exception as exc:  # a pass that fails (the store unreachable) is reported; the next one retries
                self.errors.append(f"{datetime.now(UTC).isoformat(timespec='seconds')} {type(exc).__name__}: {exc}")
            self._wake.wait(self.settings.interval)
            self._wake.clear()

    # -- one pass ------------------------------------------------------------------------------------

    def run_once(self) -> list[BankPass]:
        """One pass over every bank of the source (see the module docstring): a live store's banks
        CLAIM_BATCH at a time, each batch imported, compacted and exported by the worker that claims it
        (`_live_pass`); a path's banks compacted (steps 2-4)."""
        self.passes += 1
        if self.live:
            return self._live_pass()
        banks = self.banks()
        since = _since(banks)
        marks = {path: found.mark.id if found.mark else None for path, found in since.items()}
        return self._bank_passes(banks, self._reasons(banks, since), marks)

    def _reasons(self, banks: Sequence[MemoryStore], since: dict[str, SinceLast]) -> dict[str, str | None]:
        """Why each bank needs work (`needs_work_many`), the judge read once for every bank's new pairs."""
        unjudged = _needs_work_unjudged(banks, self.settings.grow_by, since)
        if all(found is None for found in unjudged.values()):
            return unjudged  # an idle pass: no judge, no policy, no model loaded
        judge = self._trigger_judge()
        reasons = _judged_reasons(unjudged, judge)
        for bank in banks:
            if isinstance(unjudged[bank.path], list) and reasons[bank.path] is None:
                mark_judged(bank, since[bank.path], judge)
        return reasons

    def _judge_ahead(self, banks: Sequence[MemoryStore]) -> None:
        """Every pair that meets in those of `banks` that are one neighbourhood, judged in one batch for
        their compactions (a batch of banks pays the judge's per-call costs once)."""
        if not banks:
            return  # nothing to judge: no policy loaded
        policy = self.policy()
        if not isinstance(policy, JudgingPolicy):
            return
        size, read = self._size(), []
        for bank in banks:
            keys, vectors = bank.vectors()
            if 1 < len(keys) <= size:
                records = {m.key: m for m in bank.get_many(keys)}
                read.append(([records[k] for k in keys], vectors))
        policy.judge_banks(read)

    def _bank_passes(self, banks: Sequence[MemoryStore], reasons: dict[str, str | None], marks: dict[str, int | None]) -> list[BankPass]:
        """Steps 2-4 on each bank of a path, progress reported. Banks with work are claimed a batch at a
        time (`claim_batches`; the ones another worker holds are skipped), and the pairs of the claimed
        ones judged in one batch; stopping leaves the rest for the next pass, which finds them by their
        state (never compacted, or grown since), not by this one's. `marks`: each bank's last compacted
        mark as `reasons` read it."""
        passes = []
        proposed = banks_with_proposed(self.root.engine, [bank.path for bank in banks])
        def has_work(bank: MemoryStore) -> bool:
            return reasons[bank.path] is not None or bank.path in proposed

        for start, batch in claim_batches(banks, has_work):
            work = [bank.path for bank in batch if has_work(bank)]
            with claim_many(self.root.engine, work) as held:
                self._judge_ahead([bank for bank in batch if bank.path in held and reasons[bank.path] is not None])

                def do(bank: MemoryStore, work: list[str] = work, held: set[str] = held) -> BankPass:
                    if bank.path not in work:  # nothing to do here: no claim, no query
                        return self.compact_bank_if_needed(bank, None, leftovers=False)
                    if bank.path in held:
                        return self._claimed(bank, reasons[bank.path], bank.path in proposed, marks.get(bank.path))
                    return BankPass(bank.path, elsewhere="being compacted by another worker")

                if not self._each(batch, start, len(banks), do, passes):
                    break
        return passes

    def _each(self, batch: Sequence[MemoryStore], start: int, total: int, do: Callable[[MemoryStore], BankPass],
              passes: list[BankPass]) -> bool:
        """`do` on each bank of a batch in order, its pass added to `passes` and progress reported; False
        when asked to stop (the rest is left for the next pass)."""
        for number, bank in enumerate(batch, start + 1):
            if self._stop.is_set():
                return False
            passes.append(do(bank))
            if self.on_progress is not None:
                self.on_progress(number, total)
        return True

    def _claimed(self, bank: MemoryStore, reason: str | None, leftovers: bool, mark: int | None) -> BankPass:
        """Steps 2-4 on a bank this worker holds, unless another worker compacted it since `reasons` read it."""
        self._step("claimed", bank.path)
        if reason is not None:
            found = _since([bank])[bank.path].mark
            if (found.id if found else None) != mark:
                return BankPass(bank.path, elsewhere="compacted by another worker during this pass")
        return self.compact_bank_if_needed(bank, reason, leftovers=leftovers)

    def banks(self) -> list[MemoryStore]:
        """The banks of a path source: the path itself and every namespace under it but forks."""
        found = self.root.list_namespaces(prefix=self.path)
        skip = set(self.settings.skip_labels)
        return [self.root.scoped(ns) for ns in found if not skip & set(ns[len(self.path):])]

    def _live_pass(self) -> list[BankPass]:
        """Steps 1-5 over every bank of a live store. The store is read once (one query for its items, one
        for the banks' source rows); then a batch of banks (`claim_batches`: those the app moved, or with
        changes waiting, counted) is claimed whole and is this worker's from its import to its export:
        several workers import, judge and compact batches side by side, never one bank twice, and a bank
        is never compacted half imported. A batch's new texts are embedded at once, its unmoved banks
        imported without a query, and its banks' new pairs judged in one batch."""
        from memupdate.bank.live_sync import banks_with_pending_writes
        from memupdate.bank.source_import import bank_namespace, unmoved
        from memupdate.bank.sources import source_records, written_since

        records = source_records(self.root, self.kind.kinds, self.kind.uri(self.source))
        for path in banks_with_pending_writes(self.root.engine, [r["namespace"] for r in records.values()]):
            with claim(self.root.engine, path) as held:
                if held:  # else the worker holding it writes its changes
                    self._step("resume", path)
                    export_changes(self.root.scoped(path), url=self.source)
        source, groups = self._read_items(records)
        namespaces = sorted(groups)
        banks = [self.root.scoped(bank_namespace(source, ns)) for ns in namespaces]
        of_bank = {bank.path: ns for bank, ns in zip(banks, namespaces, strict=True)}
        moved = {bank.path for bank, ns in zip(banks, namespaces, strict=True)
                 if records.get(ns, {}).get("namespace") != bank.path or not unmoved(records[ns], groups[ns])}
        proposed = banks_with_proposed(self.root.engine, list(of_bank))
        passes: list[BankPass] = []
        for start, batch in claim_batches(banks, lambda bank: bank.path in moved or bank.path in proposed):
            with claim_many(self.root.engine, [bank.path for bank in batch]) as held:
                mine = [bank for bank in batch if bank.path in held]
                if written := written_since(self.root, records, [bank.path for bank in mine]):
                    # Another worker imported or exported some of them since the store was read: read it again,
                    # or an item its export removed would come back as new.
                    records |= source_records(self.root, self.kind.kinds, self.kind.uri(self.source), banks=written)
                    source, groups = self._read_items(records, keep=groups)
                self._step("import", "")
                imported = self._import([of_bank[bank.path] for bank in mine], groups, records, source)
                since = _since(mine)
                reasons = self._reasons(mine, since)
                self._judge_ahead([bank for bank in mine if reasons[bank.path] is not None])

                def do(bank: MemoryStore, held: set[str] = held, reasons: dict = reasons, imported: dict = imported) -> BankPass:
                    if bank.path not in held:
                        return BankPass(bank.path, elsewhere="being compacted by another worker")
                    done = self.compact_bank_if_needed(bank, reasons[bank.path], leftovers=bank.path in proposed)
                    return self._export(bank, done, imported[bank.path])

                if not self._each(batch, start, len(banks), do, passes):
                    break
        return passes

    def _read_items(self, records: dict[tuple[str, ...], dict[str, Any]],
                    keep: dict[tuple[str, ...], list[Any]] | None = None) -> tuple[Any, dict[tuple[str, ...], list[Any]]]:
        """The live store's items under the prefix, by source namespace (those of `records` with none left
        too), and the `Source` their banks record; with `keep`, only its namespaces (this pass's banks)."""
        prefix = self.settings.prefix
        source, items = self.kind.read(self.source, prefix, self.settings.into)
        groups: dict[tuple[str, ...], list[Any]] = {ns: [] for ns in records if ns[: len(prefix)] == prefix}
        for item in items:
            groups.setdefault(tuple(item.namespace), []).append(item)
        return source, groups if keep is None else {ns: groups.get(ns, []) for ns in keep}

    def _import(self, namespaces: Sequence[tuple[str, ...]], groups: dict[tuple[str, ...], list[Any]],
                records: dict[tuple[str, ...], dict[str, Any]], source: Any) -> dict[str, Any]:
        """Step 1 for the banks of `namespaces` (source namespaces this worker holds): their new texts
        embedded in one batch, then each bank imported (one whose items did not move, without a query).
        Returns each bank's `ImportReport`, by bank path."""
        from memupdate.bank.source_import import import_items

        chosen = [item for ns in namespaces for item in groups[ns]]
        _embed_new(self.root, chosen, records)
        reports = import_items(self.root, chosen, source, mirror=True, records=records, namespaces=namespaces)
        return {report.bank: report for report in reports}

    def _export(self, bank: MemoryStore, done: BankPass, report: Any) -> BankPass:
        """Step 5: the import's summary on the bank's pass, and its applied changes written to the store."""
        done.imported, done.from_app = report.summary(), report.from_app()
        if done.applied:
            self._step("export", bank.path)
            done.export = export_changes(bank, url=self.source, before_commit=lambda b=bank.path: self._step("export-commit", b),
                                         after_commit=lambda b=bank.path: self._step("exported", b))
            done.dropped |= done.export.conflicts
        return done

    def compact_bank_if_needed(self, bank: MemoryStore, reason: str | None, *, leftovers: bool = True) -> BankPass:
        """Steps 2-4 of the module docstring on one bank; `reason`: why it needs work (None: it does not,
        `needs_work`); `leftovers`: False when the bank is known to hold no proposed change (nothing a
        killed pass left)."""
        started = time.perf_counter()
        done = BankPass(bank.path, reason)
        if leftovers:
            self._apply_safe_leftovers(bank, done)
        if done.reason is not None:
            self._compact(bank, done)
            mark_compacted(bank, done)
        done.seconds = time.perf_counter() - started
        return done

    def _compact(self, bank: MemoryStore, done: BankPass) -> None:
        self._step("compact", bank.path)
        # Here, not at the top: compaction brings the scorers (nltk, ~2 s) that an idle pass never needs.
        from memupdate.agent.compaction import compact

        policy, size, questions = self.policy(), self._size(), self.settings.questions
        if isinstance(policy, JudgingPolicy) and not policy.has_work(bank, size):
            return  # the policy would edit nothing: no fork, no episode, no review
        self._drop_orphan_forks(bank)  # it scans every fork of the database: only before a compaction
        change_id = next_change_id(bank)
        compacted = compact(policy, bank, compaction_namespace(bank.namespace, change_id),
                            questions(bank) if questions else (), size=size, check_moved=False)
        result, fork, review = compacted.result, compacted.fork, compacted.review
        touched = {e.memory_key for e in fork.events() if e.op in ("create", "update", "delete")}
        seen = known_signatures(bank)
        ours = [c for c in review.changes if set(c.keys) <= touched]
        fresh = [c for c in ours if signature(c) not in seen]
        done.known = len(ours) - len(fresh)
        worse = compacted.qa.worse_keys if compacted.qa else frozenset()
        held = {c.id: self.settings.rule.holds(c, worse) for c in fresh}
        self._step("propose", bank.path)
        compaction = {"fork_change": change_id, "episodes": result.episodes, "failed_episodes": len(result.failed_episodes)}
        parts = propose_parts(bank, fork, fresh, policy=self.policy_name, live=self.live, held=held, compaction=compaction)
        if not parts:
            fork.drop()
            return
        done.made = [part.id for part in parts]
        done.queued += [part.id for part in parts if part.details["held"]]
        self._apply_safe(bank, [part for part in parts if not part.details["held"]], done)
        if done.queued:
            shrink_fork(bank, fork.path)

    def _apply_safe(self, bank: MemoryStore, parts: Sequence[ChangeRecord], done: BankPass) -> None:
        """Apply each safe change alone; one the app's writes refuse is dropped, the others apply."""
        for part in parts:
            self._step("apply", bank.path)
            if missing := _replacements_missing(bank, part):  # another change of the compaction made it, and was dropped
                why = f"memory {missing[0]!r}, which replaces what the change supersedes, is not in the bank: nothing was applied"
                discard_change(bank, part.id, note={"conflict": why})
                done.dropped[part.id] = why
                continue
            try:
                apply_change(bank, part.id)
                done.applied.append(part.id)
            except ChangeConflict as exc:  # the app wrote one of its memories since the fork: drop this one only
                discard_change(bank, part.id, note={"conflict": str(exc)})
                done.dropped[part.id] = str(exc)

    def _apply_safe_leftovers(self, bank: MemoryStore, done: BankPass) -> None:
        """Safe changes a killed pass proposed but did not get to apply: apply them now (or drop them)."""
        left = [c for c in history(bank) if c.status == "proposed" and c.details.get("held") == [] and c.part_keys is not None]
        if left:
            self._apply_safe(bank, left, done)

    # -- helpers -------------------------------------------------------------------------------------

    @property
    def policy_name(self) -> str:
        name, model = self.settings.policy, self.settings.model
        return name if isinstance(name, str) and not model else f"{name}:{model}" if isinstance(name, str) else type(name).__name__

    def policy(self) -> BaseChatModel:
        if self._policy is None:
            from memupdate.agent.policies import make_policy

            name, settings = self.settings.policy, self.settings
            # The trigger's judge, if it read first: the heuristic judges no pair it read again.
            given = {"judge": self._remembering} if self._remembering is not None else {}
            # Reviewed: what the judge asks about is proposed and waits in the queue (the safety rule holds it).
            self._policy = make_policy(name, self.root, model=settings.model, base_url=settings.base_url,
                                       api_key=settings.api_key, reviewed=True, **given)
            if self._policy is None:
                raise MemupdateError(f"policy {name!r} makes no edits: choose heuristic, openai or hf")
        return self._policy

    def _trigger_judge(self) -> RelationJudge:
        """The judge that reads a pass's new pairs (`_reasons`): the policy's own where it has one (what it
        reads now it will not read again). The heuristic's, before the policy is built, is a remembering
        judge handed to it when it is (building it imports the chat models: half a second a command whose
        new memories need no compaction)."""
        if self._policy is None and self.settings.policy == "heuristic" and not self.settings.model:
            if self._remembering is None:
                self._remembering = RememberingJudge(make_judge())
            return self._remembering
        policy = self.policy()
        return policy.remembering_judge() if isinstance(policy, JudgingPolicy) else make_judge()

    def _size(self) -> int:
        from memupdate.agent.compaction import DEFAULT_NEIGHBOURHOOD

        return self.settings.size or DEFAULT_NEIGHBOURHOOD

    def _step(self, step: str, bank: str) -> None:
        if self.on_step is not None:
            self.on_step(step, bank)

    def _drop_orphan_forks(self, bank: MemoryStore) -> None:
        """Drop forks under the bank that no proposed change names and nobody wrote lately (a killed run's)."""
        named = proposed_forks(bank)
        cutoff = datetime.now(UTC) - ORPHAN_FORK_AGE
        for fork in namespaces_labelled(bank.engine, COMPACTION_LABEL, under=bank.path):
            if fork.namespace in named or not fork.last_write or fork.last_write >= cutoff:
                continue
            orphan = bank.scoped(fork.namespace)
            if orphan.forked_from() not in named:  # an episode's scratch namespace belongs to the fork it copies
                orphan.drop()


def claim_batches(banks: Sequence[MemoryStore], has_work: Callable[[MemoryStore], bool]) -> list[tuple[int, Sequence[MemoryStore]]]:
    """`banks` cut into the runs a worker claims one at a time (each with its first index): CLAIM_BATCH
    banks with work each (the last fewer), and the banks without work between them. Where fewer than
    twice CLAIM_BATCH have work, half of them a run (at least MIN_CLAIM_BATCH): a second worker started at
    once takes the other half."""
    size = min(CLAIM_BATCH, max(MIN_CLAIM_BATCH, -(-sum(map(has_work, banks)) // 2)))
    runs, start, taken = [], 0, 0
    for i, bank in enumerate(banks):
        taken += has_work(bank)
        if taken == size or i == len(banks) - 1:
            runs.append((start, banks[start : i + 1]))
            start, taken = i + 1, 0
    return runs


def _replacements_missing(bank: MemoryStore, part: ChangeRecord) -> list[str]:
    """The memories a part names as replacing those it supersedes that are neither its own nor in the bank."""
    own = set(part.part_keys or [])
    wanted = {k for why in (part.details.get("replaced") or {}).values() for k in why.get("by") or [] if k not in own}
    return [key for key in sorted(wanted) if not _held(bank, key)]


def _held(bank: MemoryStore, key: str) -> bool:
    try:
        bank.get(key)
    except MemoryNotFound:
        return False
    return True


def needs_work(bank: MemoryStore, grow_by: int, judge: RelationJudge) -> str | None:
    """Why the bank needs a compaction, or None: never compacted (2 memories or more), grown by
    `grow_by` memories since its last compaction, or a memory created since meets one the relation
    judge `judge` reads as a duplicate or an update of it: pairs meet when they are written, as each new
    memory and its nearest live memories above a floor (`judge.meeting`)."""
    return needs_work_many([bank], grow_by, judge)[bank.path]


def needs_work_many(banks: Sequence[MemoryStore], grow_by: int, judge: RelationJudge) -> dict[str, str | None]:
    """`needs_work` of each bank, by path, the judge reading every bank's new pairs in one batch."""
    return _judged_reasons(_needs_work_unjudged(banks, grow_by), judge)


def _judged_reasons(unjudged: dict[str, str | list | None], judge: RelationJudge) -> dict[str, str | None]:
    """`_needs_work_unjudged`'s findings by bank, the pairs among them judged in one batch."""
    reasons: dict[str, str | None] = {}
    meeting: dict[str, list] = {}
    for path, reason in unjudged.items():
        if isinstance(reason, list):
            meeting[path], reason = reason, None
        reasons[path] = reason
    pairs = [pair for found in meeting.values() for pair in found]
    if not pairs:
        return reasons
    verdicts = iter(judge_memories(judge, pairs))
    for path, found in meeting.items():
        for (old, fresh), verdict in zip(found, verdicts, strict=False):
            # An update or a duplicate the decision does not leave (a rule's update over two events it does).
            if reasons[path] is None and verdict.relation in ("update", "duplicate") and judge.auto_apply.act(verdict) != "leave":
                reasons[path] = f"new memory {fresh.key} meets {old.key}: the judge reads {verdict.relation} ({verdict.confidence:.2f})"
    return reasons


def _needs_work_unjudged(banks: Sequence[MemoryStore], grow_by: int,
                         since: dict[str, SinceLast] | None = None) -> dict[str, str | list | None]:
    """`needs_work` of each bank as far as it goes without the judge: a reason, None, or the pairs (an
    older memory, a new one) the judge must read, of the memories created since it was last compacted
    and last judged (`since`: what each bank did since it was last compacted, else read for all at once)."""
    since = _since(banks) if since is None else since
    grown = [bank.path for bank in banks if since[bank.path].events]
    judged = {path: int(mark.after["through"]) for path, mark in latest_marks(banks[0].engine, grown, JUDGED_OP).items()} if grown else {}
    return {bank.path: _unjudged(bank, grow_by, since[bank.path], judged.get(bank.path, 0)) for bank in banks}


def _since(banks: Sequence[MemoryStore]) -> dict[str, SinceLast]:
    """What each bank did since it was last compacted (`store.since_last`), in one read for all."""
    if not banks:
        return {}
    return since_last(banks[0].engine, [bank.path for bank in banks], mark=COMPACTED_OP, op="create")


def _unjudged(bank: MemoryStore, grow_by: int, since: SinceLast, judged_through: int = 0) -> str | list | None:
    """One bank's `_needs_work_unjudged`; `judged_through`: the last create event a pass already judged."""
    if since.mark is None:
        return f"never compacted ({since.memories} memories)" if since.memories >= 2 else None
    created = [e for e in since.events if not written_by_a_change(e)]
    vectors = bank.vectors_of(sorted({e.memory_key for e in created}))
    if len(vectors) >= grow_by:
        return f"grown by {len(vectors)} memories since its last compaction"
    fresh = {e.memory_key for e in created if e.id > judged_through}
    keys = [key for key in vectors if key in fresh]
    if not keys:
        return None
    from memupdate.judge.meeting import MEET_FLOOR, MEET_K

    new = {m.key: m for m in bank.get_many(keys)}
    pairs = []
    for key, hits in zip(keys, bank.search_many_by_vector([vectors[k] for k in keys], top_k=MEET_K + 1), strict=True):
        pairs += [(h.memory, new[key]) for h in hits if h.memory.key != key and h.score >= MEET_FLOOR and key in new]
    return pairs or None


def _embed_new(root: MemoryStore, items: Sequence[Any], records: dict[tuple[str, ...], dict[str, Any]]) -> None:
    """Embed, in one batch (the embedder keeps them), the texts of the items new or changed since each
    bank's source row: an import then embeds nothing bank by bank."""
    from memupdate.bank.sources import memory_text

    texts = []
    for item in items:
        seen = (records.get(tuple(item.namespace)) or {}).get("items", {}).get(item.key)
        if seen is None or seen.get("updated_at") != item.updated_at or seen.get("value_hash") != item.value_hash:
            texts.append(memory_text(item.value))
    texts = list(dict.fromkeys(texts))
    for start in range(0, len(texts), EMBED_BATCH):
        root.embedder.embed(texts[start : start + EMBED_BATCH])


def mark_judged(bank: MemoryStore, since: SinceLast, judge: RelationJudge) -> None:
    """The event row after which a pass judges a bank's new memories again (`JUDGED_OP`): its create
    events in `since`, all read by `judge` and left."""
    through = max((e.id for e in since.events if not written_by_a_change(e)), default=0)
    after = {"through": through, "judge": getattr(judge, "name", type(judge).__name__)}
    bank.scoped(bank.namespace, episode=WATCH_EPISODE).append_events([NewEvent(JUDGED_OP, None, None, after)])


def mark_compacted(bank: MemoryStore, done: BankPass) -> None:
    """The event row `needs_work` counts growth from."""
    after: dict[str, Any] = {"memories": bank.count(), "applied": done.applied, "queued": done.queued, "reason": done.reason}
    bank.scoped(bank.namespace, episode=WATCH_EPISODE).append_events([NewEvent(COMPACTED_OP, None, None, after)])
