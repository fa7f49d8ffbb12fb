"""One suite every session store passes unchanged: snapshots by id, atomic replace, leases.

    from genpark_repl_tools.testing.store_conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self):
            with MyStore(...) as store:
                yield store

The fixture must give an empty store. Importing this module imports pytest. The size limit is
tested by setting the store's `max_entry_bytes` attribute, which put and get must read per call.
"""

from __future__ import annotations

import threading
import time

import pytest

from ..stores import EntryTooLarge, SessionBusy, SessionStore

__all__ = ["StoreConformance"]

BLOB = bytes(range(256)) * 3


class StoreConformance:
    """Subclass and provide a `store` fixture yielding an empty SessionStore."""

    # ---- snapshots ------------------------------------------------------------------------------

    def test_missing_session_is_none(self, store: SessionStore) -> None:
        assert store.get("nobody") is None
        assert store.info("nobody") is None
        assert store.delete("nobody") is False
        assert store.list() == []

    def test_put_then_get_round_trips_bytes(self, store: SessionStore) -> None:
        entry = store.put("s1", BLOB)
        assert (entry.session, entry.version, entry.size) == ("s1", 1, len(BLOB))
        stored = store.get("s1")
        assert stored is not None and stored.data == BLOB and stored.entry.version == 1
        info = store.info("s1")
        assert info is not None and (info.version, info.size) == (1, len(BLOB))
        assert info.saved_at > 0

    def test_put_replaces_and_counts_versions(self, store: SessionStore) -> None:
        store.put("s1", b"first")
        entry = store.put("s1", b"second, longer")
        assert entry.version == 2
        stored = store.get("s1")
        assert stored is not None and stored.data == b"second, longer" and stored.entry.size == 14

    def test_list_and_delete(self, store: SessionStore) -> None:
        store.put("a", b"1")
        store.put("b", b"22")
        assert sorted((e.session, e.size) for e in store.list()) == [("a", 1), ("b", 2)]
        assert store.delete("a") is True
        assert [e.session for e in store.list()] == ["b"]
        assert store.get("a") is None and store.info("a") is None

    def test_sessions_are_separate(self, store: SessionStore) -> None:
        store.put("a", b"alpha")
        store.put("b", b"beta")
        assert store.get("a").data == b"alpha"  # type: ignore[union-attr]
        assert store.get("b").data == b"beta"  # type: ignore[union-attr]

    def test_large_blob(self, store: SessionStore) -> None:
        blob = bytes(range(256)) * 8192  # 2 MiB
        store.put("big", blob)
        stored = store.get("big")
        assert stored is not None and stored.data == blob

    def test_a_blob_over_the_limit_is_not_written_and_the_stored_one_stays(self, store: SessionStore) -> None:
        store.put("s", BLOB)
        store.put("other", b"other session")
        limit = store.max_entry_bytes
        store.max_entry_bytes = len(BLOB) + 10
        try:
            with pytest.raises(EntryTooLarge, match="it was not saved"):
                store.put("s", BLOB * 2)
            store.put("s", BLOB + b"0123456789")  # exactly the limit: taken
        finally:
            store.max_entry_bytes = limit
        stored = store.get("s")
        assert stored is not None and stored.data == BLOB + b"0123456789" and stored.entry.version == 2
        assert store.get("other").data == b"other session"  # type: ignore[union-attr]

    def test_a_stored_blob_over_the_limit_is_not_read(self, store: SessionStore) -> None:
        store.put("big", BLOB * 4)
        store.put("small", b"small")
        limit = store.max_entry_bytes
        store.max_entry_bytes = len(BLOB)
        try:
            with pytest.raises(EntryTooLarge, match="it was not read"):
                store.get("big")
            info = store.info("big")  # what the store knows without the blob is still there
            assert info is not None and info.size == len(BLOB) * 4
            assert store.get("small").data == b"small"  # type: ignore[union-attr]
        finally:
            store.max_entry_bytes = limit
        assert store.get("big").data == BLOB * 4  # type: ignore[union-attr]

    def test_readers_never_see_a_partial_replace(self, store: SessionStore) -> None:
        blobs = (b"A" * 200_000, b"B" * 300_000)
        store.put("s", blobs[0])
        seen: set[bytes] = set()
        errors: list[str] = []
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                stored = store.get("s")
                if stored is None or stored.data not in blobs:
                    errors.append("a reader saw a blob that was never written")
                    return
                seen.add(stored.data[:1])

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for i in range(40):
                store.put("s", blobs[i % 2])
        finally:
            stop.set()
            reader.join(timeout=30)
        assert not errors
        assert seen  # the reader did read

    # ---- leases ---------------------------------------------------------------------------------

    def test_a_held_lease_excludes_others(self, store: SessionStore) -> None:
        lease = store.acquire("s", ttl_s=30, wait_s=0)
        with pytest.raises(SessionBusy, match="busy in another process"):
            store.acquire("s", ttl_s=30, wait_s=0.1)
        other = store.acquire("other-session", ttl_s=30, wait_s=0)  # leases are per session
        assert store.release(other) is True
        assert store.release(lease) is True
        again = store.acquire("s", ttl_s=30, wait_s=0)
        assert store.release(again) is True

    def test_release_and_renew_need_the_token(self, store: SessionStore) -> None:
        lease = store.acquire("s", ttl_s=30, wait_s=0)
        forged = type(lease)(session="s", token="not-the-token", ttl_s=30)
        assert store.release(forged) is False
        assert store.renew(forged) is False
        with pytest.raises(SessionBusy):
            store.acquire("s", ttl_s=30, wait_s=0)
        assert store.renew(lease) is True
        assert store.release(lease) is True
        assert store.release(lease) is False  # already gone

    def test_a_waiter_gets_the_lease_when_it_is_released(self, store: SessionStore) -> None:
        lease = store.acquire("s", ttl_s=30, wait_s=0)
        got = threading.Event()

        def wait_for_it() -> None:
            mine = store.acquire("s", ttl_s=30, wait_s=20)
            got.set()
            store.release(mine)

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        assert not got.wait(0.2)  # still held
        store.release(lease)
        waiter.join(timeout=25)
        assert got.is_set()

    def test_an_expired_lease_can_be_taken_and_the_old_holder_loses_it(self, store: SessionStore) -> None:
        old = store.acquire("s", ttl_s=0.2, wait_s=0)
        new = store.acquire("s", ttl_s=30, wait_s=20)  # waits until the old lease expires
        assert store.renew(old) is False
        assert store.release(old) is False  # never removes the new holder's lease
        with pytest.raises(SessionBusy):
            store.acquire("s", ttl_s=30, wait_s=0)
        assert store.release(new) is True

    def test_hold_renews_while_the_block_runs(self, store: SessionStore) -> None:
        with store.hold("s", ttl_s=1.0, wait_s=0) as lease:
            deadline = time.monotonic() + 2.5  # more than two ttls
            while time.monotonic() < deadline:
                with pytest.raises(SessionBusy):
                    store.acquire("s", ttl_s=30, wait_s=0)
                time.sleep(0.1)
        assert store.release(lease) is False  # hold() released it
        store.release(store.acquire("s", ttl_s=30, wait_s=0))
