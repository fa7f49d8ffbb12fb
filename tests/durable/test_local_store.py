"""The default engine's own store (stores/_local.py): blobs in a private directory, leases as locks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from genpark_repl_tools.stores import EntryTooLarge, SessionBusy, StoreError
from genpark_repl_tools.stores._local import LocalStore


@pytest.fixture
def store() -> Iterator[LocalStore]:
    made = LocalStore(max_entry_bytes=1000)
    yield made
    made.close()


def test_blobs_round_trip_with_versions_and_a_private_directory(store: LocalStore) -> None:
    assert oct(os.stat(store.path).st_mode & 0o777) == "0o700"
    assert store.get("s") is None and store.info("s") is None
    assert store.put("s", b"one").version == 1
    assert store.put("s", b"two, longer").version == 2
    stored = store.get("s")
    assert stored is not None and (stored.data, stored.entry.size) == (b"two, longer", 11)
    store.put("t", b"x")
    assert [entry.session for entry in store.list()] == ["s", "t"]
    assert store.delete("s") is True and store.delete("s") is False
    assert store.get("s") is None
    # Any session name is a file name: it is hashed, never joined to the path.
    store.put("../../etc/x\0y", b"z")
    assert all(Path(store.path, name).parent == Path(store.path) for name in os.listdir(store.path))


def test_a_blob_over_the_limit_leaves_the_stored_one(store: LocalStore) -> None:
    store.put("s", b"kept")
    with pytest.raises(EntryTooLarge):
        store.put("s", b"x" * 1001)
    stored = store.get("s")
    assert stored is not None and stored.data == b"kept" and stored.entry.version == 1


def test_close_removes_everything_and_later_use_is_an_error() -> None:
    store = LocalStore()
    store.put("s", b"data")
    store.close()
    assert not os.path.exists(store.path)
    with pytest.raises(StoreError, match="closed"):
        store.get("s")


def free_elsewhere(store: LocalStore, session: str) -> bool:
    """Whether another thread can take the session's lease now (it gives it back at once)."""
    got: list[bool] = []

    def attempt() -> None:
        try:
            got.append(store.release(store.acquire(session, wait_s=0)))
        except SessionBusy:
            got.append(False)

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(5)
    return got == [True]


def test_a_held_session_waits_for_its_holder_and_others_do_not(store: LocalStore) -> None:
    order: list[str] = []

    def wait_for_it() -> None:
        with store.hold("s"):
            order.append("waiter")

    with store.hold("s"):
        assert not free_elsewhere(store, "s")
        assert free_elsewhere(store, "other")  # leases are per session
        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        time.sleep(0.05)
        order.append("holder done")
    waiter.join(5)
    assert order == ["holder done", "waiter"]
    assert free_elsewhere(store, "s")


def test_a_lease_is_released_when_the_block_raises(store: LocalStore) -> None:
    with pytest.raises(KeyError, match="inside"), store.hold("s"):
        raise KeyError("inside")
    assert free_elsewhere(store, "s")
