"""The engine's durable-session plumbing.

`Durability` takes and restores snapshots through the boundary's own `snapshot_session` /
`restore_session` (in-process: the session object itself; subprocess: inside the sandboxed worker,
the host signing and checking) and, with a store, wraps each run: take the session's lease, restore
the session from the store when this process does not hold its latest version, run, save.

When the session's cells run with checkpoints (which roll a failed cell back without the store),
the save waits: the store is written at most every `save_every_s` seconds while the session is
used, and on hibernation and close. A cell without a checkpoint is saved after it, as before: a
crash then rolls back to the store. With a store other engines may share (not LocalStore), a
session's first run and a run on a session taken over from the store are saved at once, a session
another process saved never waits again, and a waiting save is never written over a newer version
(see `_overtake`): engines that take turns on a session never go on from different states.

A store save holds the session's workspace files too (`_workspace`), in the same signed blob, so a
session another process or host restores has them; a restore writes back those its workspace
lacks or holds in another version. The engine's own temporary store (LocalStore) keeps none: its
sessions' workspaces stay on this host as long as the store does.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from .._boundary import BaseBoundary, ExecutionRequest
from .._models import ExecutionResult, SessionRestore
from ..stores._base import EntryTooLarge, SessionBusy
from ._format import SessionSnapshot, SnapshotError, SnapshotTooLarge, files_section, snapshot_limit
from ._workspace import pack_files, restore_files

if TYPE_CHECKING:
    from ..stores import SessionStore

__all__ = ["Durability", "resolve_key"]

KEY_ENV = "GENPARK_REPL_SNAPSHOT_KEY"
_MIN_KEY_BYTES = 16
_SHOWN_NAMES = 20
# the subprocess boundary's hint for a lost worker (boundaries/_subprocess/_claims.py): a rollback
# drops it (the observation says the variables are intact: _observation.py)
LOST_SESSION_HINT = "The session's variables are lost; the next run starts a fresh session."


def resolve_key(key: bytes | str | None, store: SessionStore | None) -> bytes:
    """The HMAC key: given, else $GENPARK_REPL_SNAPSHOT_KEY, else (no store) a random one."""
    if key is None:
        key = os.environ.get(KEY_ENV) or None
    if key is None:
        if store is not None:
            raise ValueError(
                "a store needs a snapshot_key shared by every process that restores from it: pass "
                f"snapshot_key=... (at least {_MIN_KEY_BYTES} bytes) or set ${KEY_ENV}"
            )
        return secrets.token_bytes(32)
    raw = key.encode() if isinstance(key, str) else bytes(key)
    if len(raw) < _MIN_KEY_BYTES:
        raise ValueError(f"snapshot_key must have at least {_MIN_KEY_BYTES} bytes")
    return raw


class Durability:
    """Snapshots and restores for one engine's sessions, optionally through a store."""

    def __init__(
        self,
        boundary: BaseBoundary,
        key: bytes,
        store: SessionStore | None,
        hibernate_after_s: float | None = None,
        save_every_s: float | None = None,
    ) -> None:
        if not boundary.supports_snapshots:
            raise ValueError(f"the {boundary.name!r} boundary does not support snapshots and stores")
        if hibernate_after_s is not None:
            if store is None:
                raise ValueError("hibernate_after_s needs a store to keep hibernated sessions in")
            if not hibernate_after_s > 0:
                raise ValueError("hibernate_after_s must be a positive number of seconds")
        if save_every_s is not None and not save_every_s > 0:
            raise ValueError("save_every_s must be a positive number of seconds, or None (after every run)")
        self.boundary = boundary
        self.key = key
        self.store = store
        self._keep_files = store is not None and not _engine_local(store)
        self._versions: dict[str, int] = {}  # store version this process last loaded or saved
        self._unsaved: set[str] = set()  # sessions whose last change could not be saved
        self._last_used: dict[str, float] = {}  # sessions this process ran, with their last run's end
        self._saved_at: dict[str, float] = {}  # when each session was last saved (or first deferred)
        self._pending: set[str] = set()  # sessions with changes not saved yet (checkpoints cover them)
        # Another engine may share the store (not the engine's own LocalStore). A session's first run
        # is then saved at once, and so is a run on a session taken over from the store (a version
        # this process did not hold): the process that held it sees a newer version and goes on from
        # it, never from its own older state. Once another process has saved a session, its saves
        # never wait here again, so two engines taking turns each see the other's every run. Runs
        # here that another process overtook (unsaved when it saved) are said once, with their start.
        self._exclusive = store is not None and _engine_local(store)
        self._shared: set[str] = set()
        self._overtaken: dict[str, float] = {}
        self._unsaved_since: dict[str, float] = {}  # wall clock of the first run whose save waits
        self.hibernate_after_s = hibernate_after_s
        self.save_every_s = save_every_s if store is not None else None
        self._stop = threading.Event()
        if store is not None:  # workers become a cache over the store: at the cap, idle ones hibernate
            boundary.set_room_maker(_weak_room_maker(weakref.ref(self)))
        periods = [p for p in (hibernate_after_s, self.save_every_s) if p is not None]
        if periods:
            interval = min(max(min(periods) / 4, 0.05), 30.0)
            threading.Thread(
                target=_hibernator,
                args=(weakref.ref(self), self._stop, interval),
                name="genpark-repl-hibernate",
                daemon=True,
            ).start()

    def close(self) -> None:
        self._stop.set()
        if self.store is not None:
            self.boundary.set_room_maker(None)

    def snapshot(self, name: str) -> SessionSnapshot:
        return self.boundary.snapshot_session(name, self.key)

    def restore(self, name: str, snapshot: SessionSnapshot | bytes) -> SessionRestore:
        """Restore by hand; with a store, the restored state becomes the stored one too."""
        if self.store is None:
            return self._restore(name, snapshot)
        with self.store.hold(name):
            restored = self._restore(name, snapshot)
            self._versions[name] = self.store.put(name, self._stored(name)[0].to_bytes()).version
        return restored

    def _restore(self, name: str, snapshot: SessionSnapshot | bytes, *, files: bool = True) -> SessionRestore:
        """Restore the session, and with `files` the workspace files the snapshot holds."""
        if not isinstance(snapshot, SessionSnapshot):
            snapshot = SessionSnapshot.from_bytes(snapshot, snapshot_limit(self.boundary.limits))
        restored = self.boundary.restore_session(name, snapshot, self.key)
        back: list[str] = []  # never what a worker's reply says: only what was written here
        warnings = restored.warnings
        if files and snapshot.files is not None:
            if not snapshot.verified_with(self.key):  # the boundaries check it first; one that did not
                snapshot.verify(self.key)
            workspace = self.boundary.session_workspace(name, create=True)
            if workspace is None:
                warnings = [
                    *warnings,
                    f"the {self.boundary.name} boundary has no workspace to put files back",
                ]
            else:
                try:
                    back, more = restore_files(workspace, snapshot.files, self.boundary.limits)
                except SnapshotError as exc:  # the variables are back: a run must not fail on the files
                    back, more = [], [f"the stored workspace files could not be read back ({exc})"]
                warnings = [*warnings, *more]
        return restored.model_copy(update={"files": back, "warnings": warnings})

    def _stored(self, name: str) -> tuple[SessionSnapshot, str | None]:
        """The session's snapshot as the store keeps it (with its workspace files), and the note
        saying why the files were left out, if they were."""
        if not self._keep_files:
            return self.snapshot(name), None
        # Unsigned (an empty key signs nothing), so the blob is HMACed once, with its files.
        bare = self.boundary.snapshot_session(name, b"")
        limits = self.boundary.limits
        room = [(limits.max_workspace_bytes, "the workspace quota (Limits.max_workspace_bytes)")]
        for limit, which in (
            (snapshot_limit(limits), "Limits.max_snapshot_bytes"),
            (getattr(self.store, "max_entry_bytes", None), "the store's max_entry_bytes"),
        ):
            if limit is not None:  # 8: the section's length field
                room.append((limit - bare.size_bytes - 8, f"{which}, beside the variables,"))
        try:
            files, reason = pack_files(self.boundary.session_workspace(name), *min(room))
        except OSError as exc:  # the workspace itself could not be read: the variables still go
            reason = f"the workspace could not be read ({exc.strerror or exc})"
            files = files_section([], reason)
        note = None
        if reason is not None:
            note = f"The session's workspace files were not saved to the store: {reason}. "
            note += "Its variables were saved."
        return bare.with_files(files, self.key), note

    # ---- with a store -----------------------------------------------------------------------------

    def run(
        self, request: ExecutionRequest, execute: Callable[[ExecutionRequest], ExecutionResult]
    ) -> ExecutionResult:
        store = self.store
        assert store is not None
        name = request.session
        notes: list[str] = []
        with store.hold(name):
            try:
                known = self._versions.get(name)
                restored = self._catch_up(name)
                # A version this process did not hold (another process's, or none known here): this
                # run is saved at once.
                took_over = restored is not None and not self._exclusive and known != self._versions.get(name)
                overtaken = self._overtaken.pop(name, None)
                if overtaken is not None:
                    notes.append(_overtaken_note(overtaken))
                result = execute(request)
                if _ran(result) and self.boundary.session_lost(name):
                    result = self._roll_back(name, result)
                elif _ran(result):
                    try:
                        if not took_over and self._may_wait(name):
                            self._unsaved_since.setdefault(name, time.time())
                            self._pending.add(name)
                        else:
                            note = self._save(name)
                            if note is not None:
                                notes.append(note)
                    except SnapshotError as exc:
                        self._unsaved.add(name)  # never hibernated: that would lose this run
                        notes.append(f"This run's changes were not saved to the session store: {exc}.")
            finally:
                self._last_used[name] = time.monotonic()
        if restored is not None:
            notes.insert(0, restore_note(restored))
        if notes:
            update = {"session_restored": restored, "notes": [*notes, *result.notes]}
            result = result.model_copy(update=update)
        return result

    def _may_wait(self, name: str) -> bool:
        """Whether this run's save may wait: the session's cells run with checkpoints, and it was
        saved less than save_every_s ago (its first deferred run starts the clock)."""
        if self.save_every_s is None or name in self._unsaved or not self.boundary.checkpointed(name):
            return False
        if not self._exclusive and (name not in self._versions or name in self._shared):
            return False  # never saved (another engine would find nothing), or taken in turns
        now = time.monotonic()
        return now - self._saved_at.setdefault(name, now) < self.save_every_s

    def _save(self, name: str) -> str | None:
        """Write the session's state to the store (caller holds its lease); the note saying what of
        it was left out, if anything was."""
        assert self.store is not None
        known = self._versions.get(name)
        if not self._exclusive and known is not None and name in self._pending:
            entry = self.store.info(name)
            if entry is not None and entry.version != known:  # another process saved since: it goes on
                self._overtake(name)
                return None
        snapshot, note = self._stored(name)
        try:
            entry = self.store.put(name, snapshot.to_bytes())
        except EntryTooLarge as exc:  # like a snapshot over the engine's limit: the run says so
            raise SnapshotTooLarge(str(exc)) from None
        self._versions[name] = entry.version
        self._unsaved.discard(name)
        self._pending.discard(name)
        self._unsaved_since.pop(name, None)
        self._saved_at[name] = time.monotonic()
        return note

    def _overtake(self, name: str) -> None:
        """Another process saved the session over this process's unsaved runs: they are dropped (its
        state goes on), said at the session's next run here, and its saves stop waiting."""
        self._overtaken[name] = self._unsaved_since.pop(name, time.time())
        self._pending.discard(name)
        self._shared.add(name)

    def _roll_back(self, name: str, result: ExecutionResult) -> ExecutionResult:
        """The cell's worker was lost, with no checkpoint: bring the session back to its last stored
        state. That is the state before this cell unless runs since the last save were left to the
        checkpoints (the cell before this one had one): then the result says how far back it went.
        Nothing is saved over it."""
        assert self.store is not None
        stored = self.store.get(name)
        if stored is None:
            return result  # nothing was stored yet: the session restarts empty, as without a store
        try:
            # The workspace is as the cell left it, which the observation says ("Files it wrote in
            # the workspace stay"): its older copies in the store are not put back over it.
            self._restore(name, stored.data, files=False)
        except Exception as exc:  # the result stays what it was: the variables are lost
            note = f"Rolling the session back to its stored snapshot failed ({type(exc).__name__}: {exc})."
            return result.model_copy(update={"notes": [*result.notes, note]})
        self._versions[name] = stored.entry.version
        older = name in self._pending
        self._pending.discard(name)
        self._saved_at[name] = time.monotonic()
        error = result.error
        if error is not None and error.hint:
            hint = error.hint.replace(LOST_SESSION_HINT, "").strip() or None
            error = error.model_copy(update={"hint": hint})
        if older:  # not the state before this cell: rolled_back would claim it
            saved = datetime.fromtimestamp(stored.entry.saved_at, timezone.utc)
            when = saved.strftime("%Y-%m-%d %H:%M:%S UTC")
            note = (
                f"The session was restored from its last save ({when}), which is older than this cell: "
                "the changes of the runs after that save are gone too."
            )
            return result.model_copy(update={"error": error, "notes": [*result.notes, note]})
        return result.model_copy(update={"rolled_back": True, "error": error})

    def catch_up(self, name: str) -> SessionRestore | None:
        """Under the session's lease, bring it up to its stored version (for queries)."""
        assert self.store is not None
        with self.store.hold(name):
            return self._catch_up(name)

    def _catch_up(self, name: str) -> SessionRestore | None:
        """Restore the session from the store unless this process holds its latest version."""
        assert self.store is not None
        entry = self.store.info(name)
        known = self._versions.get(name)
        if entry is None or (known == entry.version and name in self.boundary.sessions()):
            return None
        stored = self.store.get(name)
        if stored is None:
            return None
        restored = self._restore(name, stored.data)
        if known is not None and known != stored.entry.version and not self._exclusive:
            self._shared.add(name)  # another process saved it
            if name in self._pending:
                self._overtake(name)
        self._versions[name] = stored.entry.version
        self._pending.discard(name)  # another process saved a newer state: that one goes on
        self._saved_at[name] = time.monotonic()
        return restored

    # ---- hibernation ------------------------------------------------------------------------------

    def hibernate(self, name: str) -> bool:
        """Stop the session's worker if its latest state is in the store (or a newer one another
        process saved); it comes back from the store on its next call. False if it is busy,
        unsaved, or not held here."""
        store = self.store
        if store is None:
            raise ValueError("hibernation needs a store")
        if name in self._unsaved:
            return False
        try:
            lease = store.acquire(name, wait_s=0)
        except SessionBusy:
            return False
        try:
            if name in self._pending:
                try:
                    self._save(name)
                except SnapshotError:
                    self._unsaved.add(name)  # kept live; its next run says why it was not saved
                    return False
            # Stored: our latest state (saved just above if it waited), or a newer one another
            # process saved, which makes this worker's state stale: either way nothing is lost.
            if store.info(name) is None:
                return False
            stopped = self.boundary.hibernate(name)
        finally:
            store.release(lease)
        if stopped:
            self._last_used.pop(name, None)
        return stopped

    def make_room(self, idle: list[str]) -> bool:
        """Hibernate the first of `idle` (least recently used first) that can go: the boundary is at
        its worker cap. False if none could (busy, unsaved, or the store failed)."""
        for name in idle:
            try:
                if self.hibernate(name):
                    return True
            except Exception:  # a store hiccup on this one: the next may still go
                continue
        return False

    def flush(self, names: list[str] | None = None) -> None:
        """Save the sessions whose changes wait for their save (all, or `names`), before they close.
        Every one is tried; the first failure is raised after."""
        store = self.store
        if store is None:
            return
        held = set(self.boundary.sessions())
        failed: Exception | None = None
        for name in sorted(self._pending) if names is None else names:
            if name not in held:  # its worker is gone: nothing left to save
                self._pending.discard(name)
                continue
            try:
                with store.hold(name):
                    if name in self._pending:
                        self._save(name)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def save_due(self) -> None:
        """Save the sessions whose changes have waited save_every_s, unless they are busy (their run
        then saves them): a session idle after a burst of cells is not left unsaved."""
        store, every = self.store, self.save_every_s
        assert store is not None and every is not None
        now = time.monotonic()
        held = set(self.boundary.sessions())
        for name in sorted(self._pending):
            if name not in held or now - self._saved_at.get(name, now) < every:
                continue
            try:
                lease = store.acquire(name, wait_s=0)
            except SessionBusy:
                continue
            try:
                if name in self._pending:
                    self._save(name)
            except Exception:  # not saveable now (its next run says why) or a store hiccup
                self._saved_at[name] = now  # tried again after another save_every_s
            finally:
                store.release(lease)

    def hibernate_idle(self) -> None:
        limit = self.hibernate_after_s
        assert limit is not None
        now = time.monotonic()
        held = set(self.boundary.sessions())
        for name, last in list(self._last_used.items()):
            if name not in held:  # closed or evicted meanwhile: nothing to stop
                self._last_used.pop(name, None)
            elif now - last > limit:
                try:
                    self.hibernate(name)
                except Exception:  # a store hiccup: try again at the next pass
                    continue

    def forget(self, name: str) -> None:
        """The session was reset: its stored snapshot goes too."""
        if self.store is not None:
            with self.store.hold(name):
                self.store.delete(name)
            self._versions.pop(name, None)
            self._pending.discard(name)
            self._saved_at.pop(name, None)


def _hibernator(ref: weakref.ref[Durability], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        durability = ref()
        if durability is None:
            return
        if durability.save_every_s is not None:
            durability.save_due()
        if durability.hibernate_after_s is not None:
            durability.hibernate_idle()
        del durability


def _weak_room_maker(ref: weakref.ref[Durability]) -> Callable[[list[str]], bool]:
    # Weak: the boundary must not keep the engine's Durability (and its thread) alive.
    def make_room(idle: list[str]) -> bool:
        durability = ref()
        return durability is not None and durability.make_room(idle)

    return make_room


def _engine_local(store: SessionStore) -> bool:
    from ..stores._local import LocalStore

    return isinstance(store, LocalStore)


def _ran(result: ExecutionResult) -> bool:
    """Whether the run executed code (it may have changed the session, even in place)."""
    error = result.error
    if result.status == "blocked":  # by a runtime guard (refused_by), the code ran up to the refusal
        return error is not None and error.refused_by is not None
    return not (
        result.status == "error" and error is not None and error.type in ("SyntaxError", "InputTooLarge")
    )


def _overtaken_note(since: float) -> str:
    when = datetime.fromtimestamp(since, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "Another process continued this session from the store before this process saved its runs "
        f"since {when}: those runs are not in it, and it goes on from the other process's state. "
        "Run them again if they are still needed."
    )


def restore_note(restored: SessionRestore) -> str:
    when = restored.snapshot_created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    names = restored.restored
    shown = ", ".join(names[:_SHOWN_NAMES]) + (
        f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else ""
    )
    parts = [f"This session was restored from its snapshot of {when}: {shown or 'no variables'} came back."]
    if restored.files:
        files = restored.files
        more = f" and {len(files) - _SHOWN_NAMES} more" if len(files) > _SHOWN_NAMES else ""
        parts.append(f"Its workspace files are back: {', '.join(files[:_SHOWN_NAMES])}{more}.")
    if restored.not_saved:
        lost = "; ".join(f"{s.name} ({s.reason})" for s in restored.not_saved[:_SHOWN_NAMES])
        parts.append(f"Not saved, define again: {lost}.")
    if restored.failed:
        failed = "; ".join(f"{n} ({why})" for n, why in list(restored.failed.items())[:_SHOWN_NAMES])
        parts.append(f"Could not be rebuilt here: {failed}.")
    parts.extend(f"Warning: {w}." for w in restored.warnings)
    return " ".join(parts)
