"""`cache_list` and `cache_prune` (issue 16, `kiln cache`): the operator lists the artifact
cache, sees the entries of an older compiler as stale, and prunes them; both refuse tenants
without stats=all and bad params. Each against a real kilnd; the older compiler is a real
one too (a copy of the compile worker with one more byte: another build hash, so another
identity)."""

import contextlib
import os
import shutil
import time

import pytest

import kiln

from test_tuner_server import quick

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _worker_dir(kilnd_bin, tmp_path, changed):
    """--worker-dir with the build's workers; with ``changed``, a compile worker of another
    build hash (one byte appended), which makes a new compiler identity."""
    build = os.path.dirname(os.path.dirname(kilnd_bin))
    d = tmp_path / ("workers-new" if changed else "workers")
    d.mkdir(exist_ok=True)
    for sub, name in (("device/worker", "kiln-device-worker"), ("compiler/worker", "kiln-compile-worker")):
        shutil.copy2(os.path.join(build, sub, name), d / name)
    if changed:
        with open(d / "kiln-compile-worker", "ab") as f:
            f.write(b"\0")
    return str(d)


def _start(kilnd_bin, tmp_path, cache, workers, *args):
    return kiln.start_daemon(kilnd_bin, listen=["unix:" + str(tmp_path / "c.sock")], cache_dir=str(cache),
                             tmpdir=str(tmp_path), args=["--worker-dir", workers, "--compile-workers", "1",
                                                        "--devices", "cpu"] + list(args))


@contextlib.contextmanager
def _daemon_session(kilnd_bin, tmp_path, cache, changed=False):
    """A session to a kilnd on ``cache`` (with the changed compiler: another identity)."""
    d = _start(kilnd_bin, tmp_path, cache, _worker_dir(kilnd_bin, tmp_path, changed))
    try:
        with kiln.connect(d.url) as s:
            yield s
    finally:
        d.stop()


def _all_items(s, **params):
    items, after = [], None
    while True:
        p = dict(params)
        if after:
            p["after"] = after
        r = s.call("cache_list", p)
        items += r["items"]
        after = r["next"]
        if after is None:
            return items, r


def test_entries_of_an_older_compiler_are_stale_and_pruned(kilnd_bin, tmp_path):
    cache = tmp_path / "cache"
    with _daemon_session(kilnd_bin, tmp_path, cache) as s:
        old_ids = {s.compile(quick(300 + i), target="cpu").id for i in range(3)}
        r = s.call("cache_list")
        old_identity = r["identity"]
        assert r["entries"] == 3 and r["stale_entries"] == 0
        assert {i["key"] for i in r["items"]} == old_ids and all(not i["stale"] for i in r["items"])
    with _daemon_session(kilnd_bin, tmp_path, cache, changed=True) as s:
        r = s.call("cache_list")
        assert r["identity"] != old_identity and r["identity_since"] > time.time() - 120
        assert r["entries"] == 3 and r["stale_entries"] == 3 and r["stale_bytes"] == r["bytes"]
        m = s.compile(quick(300), target="cpu")   # the same source: a new key, built anew
        assert m.id not in old_ids and not m.cached
        items, r = _all_items(s)
        assert {i["key"] for i in items if i["stale"]} == old_ids
        assert [i["key"] for i in items if not i["stale"]] == [m.id]
        only, _ = _all_items(s, stale=True)
        assert {i["key"] for i in only} == old_ids
        dry = s.call("cache_prune", stale=True, dry_run=True)
        assert dry == {"removed": 3, "bytes": r["stale_bytes"], "dry_run": True}
        assert s.call("cache_list")["entries"] == 4
        assert s.call("cache_prune", stale=True)["removed"] == 3
        r = s.call("cache_list")
        assert r["entries"] == 1 and r["stale_entries"] == 0 and r["items"][0]["key"] == m.id
        since = r["identity_since"]
    # kilnd has stopped, so its writes have landed: only the new build is on disk
    assert {n for _, _, files in os.walk(cache / "objects") for n in files} == {m.id}
    # a restart with the same compiler keeps its era: nothing it used becomes stale
    with _daemon_session(kilnd_bin, tmp_path, cache, changed=True) as s:
        r = s.call("cache_list")
        assert r["identity_since"] == since and r["entries"] == 1 and r["stale_entries"] == 0


def test_listing_pages_and_prune_by_age_and_keys(kilnd_bin, tmp_path):
    cache = tmp_path / "cache"
    workers = _worker_dir(kilnd_bin, tmp_path, False)
    d = _start(kilnd_bin, tmp_path, cache, workers)
    try:
        with kiln.connect(d.url) as s:
            res = s.compile_batch([(quick(500 + i), "cpu") for i in range(25)])
            ids = sorted(m.id for m in res)
            pages = []
            after = None
            while True:
                r = s.call("cache_list", {"limit": 10, **({"after": after} if after else {})})
                pages.append([i["key"] for i in r["items"]])
                after = r["next"]
                if after is None:
                    break
                assert after == pages[-1][-1]
            assert [len(p) for p in pages] == [10, 10, 5] and sum(pages, []) == ids
            assert s.call("cache_list", after=ids[-1].upper())["items"] == []
            assert s.call("cache_list", limit=1000)["next"] is None
    finally:
        d.stop()
    # entries last used a day ago (their files' mtimes, which a restart reads)
    old = time.time() - 86400
    for name in ids[:5]:
        os.utime(cache / "objects" / name[:2] / name, (old, old))
    d = _start(kilnd_bin, tmp_path, cache, workers)
    try:
        with kiln.connect(d.url) as s:
            r = s.call("cache_prune", unused_s=3600)
            assert r["removed"] == 5
            items, _ = _all_items(s)
            assert sorted(i["key"] for i in items) == ids[5:]
            # keys: absent ones and repeats are not counted; one bad key removes nothing
            with pytest.raises(kiln.InvalidArgument):
                s.call("cache_prune", keys=[ids[5], "zz" * 32])
            assert s.call("cache_list")["entries"] == 20
            r = s.call("cache_prune", keys=[ids[5], ids[5], ids[0], ids[6].upper()])
            assert r["removed"] == 2
            assert s.call("cache_prune", all=True, dry_run=True)["removed"] == 18
            assert s.call("cache_prune", all=True)["removed"] == 18
            assert s.call("cache_list")["entries"] == 0
            with pytest.raises(kiln.NotFound):  # the module id is gone with its entry
                s.module(ids[7])
            assert not s.compile(quick(507), target="cpu").cached
    finally:
        d.stop()


@pytest.mark.parametrize("method,params,why", [
    ("cache_list", {"limit": 0}, "limit: 1 to 1000"),
    ("cache_list", {"limit": 1001}, "limit: 1 to 1000"),
    ("cache_list", {"limit": -1}, "limit"),
    ("cache_list", {"limit": "10"}, "limit"),
    ("cache_list", {"after": "zz" * 32}, "after: a key of 64 hex digits"),
    ("cache_list", {"after": "a" * 63}, "after: a key of 64 hex digits"),
    ("cache_list", {"after": "a" * 65}, "after: a key of 64 hex digits"),
    ("cache_list", {"after": 5}, "after"),
    ("cache_list", {"after": "a" * 100000}, "after: a key of 64 hex digits"),
    ("cache_list", {"stale": "yes"}, "stale"),
    ("cache_list", {"tenant": "alice"}, "tenant"),
    ("cache_prune", {}, "exactly one of"),
    ("cache_prune", {"stale": False}, "exactly one of"),
    ("cache_prune", {"stale": True, "all": True}, "exactly one of"),
    ("cache_prune", {"unused_s": 60, "keys": ["a" * 64]}, "exactly one of"),
    ("cache_prune", {"unused_s": 0}, "unused_s: 1 to"),
    ("cache_prune", {"unused_s": 1 << 40}, "unused_s: 1 to"),
    ("cache_prune", {"unused_s": -5}, "unused_s"),
    ("cache_prune", {"unused_s": 1.5}, "unused_s"),
    ("cache_prune", {"keys": []}, "keys: 1 to 1000"),
    ("cache_prune", {"keys": ["a" * 64] * 1001}, "keys: 1 to 1000"),
    ("cache_prune", {"keys": "a" * 64}, "keys"),
    ("cache_prune", {"keys": [1]}, "keys[0]: a module id"),
    ("cache_prune", {"keys": ["a" * 64, ["nested"]]}, "keys[1]: a module id"),
    ("cache_prune", {"keys": ["../../secret" + "a" * 52]}, "keys[0]: a module id"),
    ("cache_prune", {"all": 1}, "all"),
    ("cache_prune", {"all": True, "dry_run": "no"}, "dry_run"),
    ("cache_prune", {"stale": True, "force": True}, "force"),
])
def test_bad_params_are_refused(s, method, params, why):
    with pytest.raises(kiln.InvalidArgument) as e:
        s.call(method, params)
    assert why in e.value.message, e.value.message


def test_tenants_without_stats_all_may_not_list_or_prune(kilnd_bin, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("ops-token-0123456789abc ops stats=all\nalice-token-0123456789 alice\n")
    cache = tmp_path / "cache"
    d = _start(kilnd_bin, tmp_path, cache, _worker_dir(kilnd_bin, tmp_path, False), "--tokens", str(tokens))
    try:
        with kiln.connect(d.url, token="alice-token-0123456789") as alice, \
                kiln.connect(d.url, token="ops-token-0123456789abc") as ops:
            mine = alice.compile(quick(700), target="cpu")
            theirs = ops.compile(quick(701), target="cpu")
            for method, params in (("cache_list", {}), ("cache_prune", {"all": True}),
                                   ("cache_prune", {"keys": [theirs.id]}), ("cache_prune", {"keys": [mine.id]}),
                                   ("cache_prune", {"stale": True, "dry_run": True})):
                with pytest.raises(kiln.PermissionDenied) as e:
                    alice.call(method, params)
                assert "operator" in e.value.message and "stats=all" in e.value.message
            assert ops.call("cache_list")["entries"] == 2   # nothing went
            assert alice.module(mine.id).id == mine.id
            assert ops.call("cache_prune", keys=[mine.id])["removed"] == 1
            with pytest.raises(kiln.NotFound):
                alice.module(mine.id)
    finally:
        d.stop()
