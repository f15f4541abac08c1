"""kiln.fleet: the kilnd hosts of a fleet, read from its registry on Redis, and sessions
placed on them by device and load (docs/python.md "A fleet", docs/operations.md "A fleet").

Each kilnd started with ``--fleet URL --advertise ADDR`` publishes a record (its address,
version, compiler identity, devices and their load) under ``kiln:host:ADDR`` with a TTL,
refreshed by a heartbeat; a kilnd that dies drops out within the TTL. This module only
reads. It needs the ``redis`` package (Debian: python3-redis), imported on first use, so
``import kiln`` works without it.

    s = kiln.connect("fleet:redis://10.0.0.2:6379/0", device="cuda")   # least loaded host
    s.fleet_device                                                      # the Device chosen
    for s in kiln.fleet.sessions("redis://10.0.0.2:6379/0", "cuda"):   # one per device
        ...
    kiln.autotune.tune(task, kiln.fleet.runners("redis://...", "cuda"))  # trials fanned out
    python3 -m kiln.fleet redis://10.0.0.2:6379/0                       # the table

Redis AUTH: ``password=``/``username=``, else the file named by ``$KILN_FLEET_AUTH_FILE``
(one line: PASSWORD or USER PASSWORD, as kilnd's ``--fleet-auth-file``).

The registry is trusted for *where* sessions go. Unless records are verified, whoever can
write to the fleet's Redis can add a host. With a credential (``token=``, ``$KILN_TOKEN`` or a
client certificate), placement therefore takes only ``tls:`` hosts (verified with the
caller's TLS options) and ``unix:`` ones, and skips ``tcp:`` hosts with a warning, unless
``insecure_tcp=True``; and Redis write access must be limited to the kilnd hosts.

Signed records: a kilnd with ``--fleet-key FILE`` signs its record (Ed25519). With
``trusted_keys=FILE`` (or ``$KILN_FLEET_TRUSTED_KEYS``), a file of lines ``ed25519:HEX ADDR``
(``kiln fleet-key`` prints them; ADDR ``*`` for any address), only records signed by a key
trusted for the address they are listed under count: unsigned, forged, truncated ones, a
record copied under another address, and one whose signed time is over 10 minutes old are
skipped with a warning (docs/operations.md "A fleet"). Verifying needs the ``cryptography``
package (Debian: python3-cryptography).
"""

import collections
import os
import random
import stat
import sys
import time
import warnings

from .errors import InvalidArgument, KilnError, Unavailable

HOSTS_SET = "kiln:hosts"
HOST_PREFIX = "kiln:host:"
MAX_RECORD = 64 << 10  # bytes of one host's record (kilnd's are a few KiB); larger ones are skipped
_RECORD_BATCH = 32  # records read a pipeline: memory is at most this many x MAX_RECORD
MAX_HOSTS = 4096
SIG_MAGIC = b"KILNSIG1"  # server/fleet/record.h: magic, public key, signature, record
SIG_CONTEXT = b"kiln fleet record v1\n"
SIG_HEAD = 104
MAX_AGE_S = 600  # a signed record older than this is refused as a replay

# Device kinds a client may ask for, as the kinds kilnd reports.
_KINDS = {"gpu": ("hsa", "cuda"), "rocm": ("hsa",), "hsa": ("hsa",), "cuda": ("cuda",), "cpu": ("cpu",),
          "llvm": ("cpu",)}


class Host:
    """One kilnd's record. ``devices`` are dicts: id, kind, arch, capacity, used, launches,
    leased, info (the ``devices`` method's map). ``identity_differs``: its compiler identity
    is not the one most hosts have, so it shares no builds with them."""

    def __init__(self, rec):
        self.url = rec["url"]
        self.host = rec.get("host", "")
        self.version = rec.get("version", "")
        self.identity = rec.get("identity", "")
        self.started = rec.get("started", 0)
        self.time = rec.get("time", 0)
        self.ttl_ms = rec.get("ttl_ms", 0)
        self.connections = rec.get("connections", 0)
        self.tenants = rec.get("tenants", 0)
        comp = rec.get("compile") if isinstance(rec.get("compile"), dict) else {}
        self.compile = {k: comp.get(k, 0) if isinstance(comp.get(k, 0), int) else 0
                        for k in ("workers", "busy", "queued")}
        self.devices = [d for d in rec.get("devices", []) if _good_device(d)]
        self.identity_differs = False
        self.signed = False  # a trusted-keys file was in use and the record's signature verified

    def devices_of(self, device):
        kinds = _kinds(device)
        return [d for d in self.devices if d["kind"] in kinds or d["id"] == device]

    def load(self, dev):
        """Smaller is less loaded: a lease, launches in flight, compile work, connections."""
        return (bool(dev.get("leased")), dev.get("launches", 0),
                self.compile["queued"] + self.compile["busy"], self.connections)

    def __repr__(self):
        return "Host(%r, %d devices)" % (self.url, len(self.devices))


def _good_device(d):
    return (isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("kind"), str)
            and all(isinstance(d.get(k, 0), int) for k in ("launches", "capacity", "used")))


def _kinds(device):
    if device is None:
        return ("cpu", "hsa", "cuda")
    if not isinstance(device, str) or not device:
        raise InvalidArgument("device is a kind ('cuda', 'hsa', 'gpu', 'cpu') or an id, not %r" % (device,))
    return _KINDS.get(device, (device.partition(":")[0],))


def _auth(password, username):
    if password is not None:
        return password, username
    path = os.environ.get("KILN_FLEET_AUTH_FILE")
    if not path:
        return None, username
    line = open(path).read().splitlines()[0].strip() if os.path.getsize(path) else ""
    user, _, pw = line.partition(" ")
    return (pw, user) if pw else (user, username)


def redis_client(url, password=None, username=None, timeout=5.0):
    """A redis.Redis for ``redis://HOST[:PORT][/DB]`` or ``unix:PATH[?db=N]`` (a leading
    ``fleet:`` is dropped)."""
    try:
        import redis
    except ImportError:
        raise Unavailable("kiln.fleet needs the redis package (Debian: python3-redis)") from None
    if url.startswith("fleet:"):
        url = url[len("fleet:"):]
    password, username = _auth(password, username)
    kw = dict(password=password, username=username or None, socket_timeout=timeout,
              socket_connect_timeout=timeout)
    if url.startswith("unix:"):
        path, _, q = url[5:].partition("?")
        db = 0
        if q:
            if not q.startswith("db=") or not q[3:].isdigit():
                raise InvalidArgument("'%s': unix:PATH[?db=N]" % url)
            db = int(q[3:])
        return redis.Redis(unix_socket_path=path, db=db, **kw)
    if url.startswith("redis://"):
        return redis.Redis.from_url(url, **kw)
    raise InvalidArgument("'%s' is not redis://HOST[:PORT][/DB] or unix:PATH[?db=N]" % url)


def trusted_keys_read(path):
    """The keys of a trusted-keys file: {public key bytes: set of addresses ("*": any)}.
    InvalidArgument names the first line that is not ``ed25519:<64 hex> ADDR``, a comment or
    blank: a trust file that does not parse is not used; nor is one that is not a regular file,
    is writable by group or others, or is owned by someone other than you or root."""
    keys = {}
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            # the trust file decides whose records are believed: refuse one others could have
            # written (as ssh's StrictModes for authorized_keys)
            bad = ("not a regular file" if not stat.S_ISREG(st.st_mode)
                   else "writable by group or others (chmod go-w it)" if st.st_mode & 0o022
                   else "owned by another user (not you or root)" if st.st_uid not in (os.geteuid(), 0)
                   else None)
            if bad:
                raise InvalidArgument("trusted keys %s: %s" % (path, bad))
            text = f.read(1 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument("trusted keys %s: %s" % (path, e)) from None
    for i, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        ok = len(parts) == 2 and parts[0].startswith("ed25519:") and len(parts[0]) == 72 and 0 < len(parts[1]) < 256
        try:
            pub = bytes.fromhex(parts[0][8:]) if ok else None
        except ValueError:
            pub = None
        if pub is None:
            raise InvalidArgument("trusted keys %s:%d: not `ed25519:<64 hex digits> ADDR`" % (path, i))
        keys.setdefault(pub, set()).add(parts[1])
    if not keys:
        raise InvalidArgument("trusted keys %s holds no keys: every record would be refused" % path)
    return keys


def _trust(trusted_keys):
    path = trusted_keys if trusted_keys is not None else os.environ.get("KILN_FLEET_TRUSTED_KEYS")
    return trusted_keys_read(path) if path else None


def _open_record(raw, member, keys):
    """(record bytes, signed) or (None, why)."""
    if not raw.startswith(SIG_MAGIC):
        return (None, "unsigned, and a trusted-keys file is in use") if keys else (raw, False)
    if len(raw) <= SIG_HEAD:
        return None, "signed, but shorter than its signature and a record"
    pub, sig, rec = raw[8:40], raw[40:104], raw[SIG_HEAD:]
    if keys:
        addrs = keys.get(pub, ())
        if "*" not in addrs and member not in addrs:
            return None, "signed by a key not trusted for this address"
        try:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        except ImportError:
            raise Unavailable("verifying fleet records needs the cryptography package "
                              "(Debian: python3-cryptography)") from None
        from cryptography.exceptions import InvalidSignature
        try:
            Ed25519PublicKey.from_public_bytes(pub).verify(sig, SIG_CONTEXT + rec)
        except InvalidSignature:
            return None, "its signature does not verify (forged or damaged)"
    return rec, bool(keys)  # signed means verified: without a trust file nothing was checked


def _decode(raw, member=None, keys=None):
    import msgpack
    if not isinstance(raw, bytes) or len(raw) > MAX_RECORD:
        return None
    raw, signed = _open_record(raw, member, keys)
    if raw is None:
        warnings.warn("kiln.fleet: skipped the record of %s: %s" % (member, signed), stacklevel=3)
        return None
    try:
        rec = msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=MAX_RECORD,
                              max_str_len=MAX_RECORD, max_array_len=4096, max_map_len=4096)
    except Exception:
        return None
    if not isinstance(rec, dict) or rec.get("v") != 1 or not isinstance(rec.get("url"), str):
        return None
    if not isinstance(rec.get("devices", []), list):
        return None
    if keys and (not isinstance(rec.get("time"), int) or rec["time"] + MAX_AGE_S < time.time()):
        warnings.warn("kiln.fleet: skipped the record of %s: signed, but its time is over 10 minutes "
                      "old (a replayed record?)" % member, stacklevel=3)
        return None
    try:
        h = Host(rec)
    except Exception:
        return None
    h.signed = signed
    return h


# The members of the hosts set, filtered in Redis (clients/c/fleet.c has the same script): a
# set member can be of any size (whoever writes to Redis can add one of hundreds of MiB) and
# SMEMBERS would send it whole. SSCAN in the script; the reply, flat: how many members were
# refused (empty or over MAX_MEMBER bytes), whether the walk stopped early, how many refused
# ones are shown, each as (length, first 80 bytes), then at most MAX_HOSTS good members.
MAX_MEMBER = 255
_MAX_BAD_SHOWN = 16
_MEMBERS_SCRIPT = """
local maxlen, maxn, maxbad, maxseen = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local good, bad, nbad, seen, cursor = {}, {}, 0, 0, '0'
repeat
  local r = redis.call('SSCAN', KEYS[1], cursor, 'COUNT', 256)
  cursor = r[1]
  for _, m in ipairs(r[2]) do
    seen = seen + 1
    if #m >= 1 and #m <= maxlen then
      if #good < maxn then good[#good + 1] = m end
    else
      nbad = nbad + 1
      if #bad < 2 * maxbad then bad[#bad + 1] = #m; bad[#bad + 1] = string.sub(m, 1, 80) end
    end
  end
until cursor == '0' or #good >= maxn or seen >= maxseen
local out = {nbad, cursor == '0' and 0 or 1, #bad / 2}
for _, v in ipairs(bad) do out[#out + 1] = v end
for _, m in ipairs(good) do out[#out + 1] = m end
return out
"""


def _members(reply):
    """The good members (bytes, sorted) of the script's reply; a warning for the refused ones.
    A reply of another shape is refused whole (a Redis that is not what it should be)."""
    def bad_reply():
        return Unavailable("%s: an unexpected reply to the members script" % HOSTS_SET)
    if not isinstance(reply, list) or len(reply) < 3 or not all(isinstance(x, int) for x in reply[:3]):
        raise bad_reply()
    refused, partial, shown = reply[:3]
    first = 3 + 2 * shown
    if not 0 <= shown <= _MAX_BAD_SHOWN or refused < shown or len(reply) < first or len(reply) - first > MAX_HOSTS:
        raise bad_reply()
    for i in range(shown):
        n, head = reply[3 + 2 * i], reply[4 + 2 * i]
        if not isinstance(n, int) or not isinstance(head, bytes) or len(head) > 80:
            raise bad_reply()
        warnings.warn("kiln.fleet: skipped a member of %s of %d bytes beginning %r: not a host address "
                      "(1 to %d bytes)" % (HOSTS_SET, n, head, MAX_MEMBER), stacklevel=3)
    if refused > shown:
        warnings.warn("kiln.fleet: skipped %d more members of %s: not host addresses" % (refused - shown, HOSTS_SET),
                      stacklevel=3)
    good = reply[first:]
    if not all(isinstance(m, bytes) and 1 <= len(m) <= MAX_MEMBER for m in good):
        raise bad_reply()
    if partial:
        warnings.warn("kiln.fleet: %s has more members than a fleet has: read %d of them" % (HOSTS_SET, len(good)),
                      stacklevel=3)
    return sorted(good)


def hosts(url, password=None, username=None, timeout=5.0, trusted_keys=None):
    """The live hosts of the fleet, sorted by address. A record that does not decode (a
    foreign or damaged key) is skipped; a host whose record expired is gone. With
    ``trusted_keys`` (a file; default ``$KILN_FLEET_TRUSTED_KEYS``) only records signed by a
    key trusted for their address count (the module's docstring)."""
    keys = _trust(trusted_keys)
    try:
        r = redis_client(url, password, username, timeout)
        members = _members(r.eval(_MEMBERS_SCRIPT, 1, HOSTS_SET, MAX_MEMBER, MAX_HOSTS, _MAX_BAD_SHOWN,
                                  16 * MAX_HOSTS))
        out = []
        for i in range(0, len(members), _RECORD_BATCH):  # decoded a batch at a time: the raw
            batch = members[i:i + _RECORD_BATCH]        # bytes of all at once could be 4096 x 64 KiB
            p = r.pipeline(transaction=False)
            for m in batch:  # a record over MAX_RECORD reads as MAX_RECORD + 1 bytes: skipped
                p.getrange(HOST_PREFIX.encode() + m, 0, MAX_RECORD)
            raws = p.execute()
            for m, raw in zip(batch, raws):
                m = m.decode("utf-8", "replace")
                h = _decode(raw, m, keys)
                if h is not None and h.url == m:
                    out.append(h)
            del raws, p
    except KilnError:
        raise
    except Exception as e:  # redis.exceptions.*: connection refused, AUTH, timeouts, wrong types
        raise Unavailable("the fleet registry at %s cannot be read: %s" % (url, e)) from None
    ids = collections.Counter(h.identity for h in out)
    if len(ids) > 1:
        common = ids.most_common(1)[0][0]
        for h in out:
            h.identity_differs = h.identity != common
    return out


def placements(url, device=None, **kw):
    """(host, device dict) for every device of the kind asked for, least loaded first
    (equal loads in random order, so clients placed at once spread); ``kw`` go to hosts."""
    found = [(h, d) for h in hosts(url, **kw) for d in h.devices_of(device)]
    random.shuffle(found)
    found.sort(key=lambda hd: hd[0].load(hd[1]))
    return found


def _credentialed(connect_kw):
    return bool(connect_kw.get("token") or os.environ.get("KILN_TOKEN") or connect_kw.get("tls_cert")
                or os.environ.get("KILN_TLS_CERT"))


def _trusted(found, connect_kw, insecure_tcp):
    """(host, device) pairs a session may go to: with a credential, tls: and unix: hosts only
    (a forged tcp: record would collect the token in clear), unless insecure_tcp."""
    pairs = []
    skipped = set()
    guard = _credentialed(connect_kw) and not insecure_tcp
    for host, dev in found:
        if guard and not host.url.startswith(("tls:", "unix:")):
            skipped.add(host.url)
            continue
        pairs.append((host, dev))
    if skipped:
        warnings.warn("kiln.fleet: skipped %s: a token is sent only to tls: or unix: hosts (pass "
                      "insecure_tcp=True to send it over tcp:)" % ", ".join(sorted(skipped)), stacklevel=3)
    return pairs


def _open(host, dev, connect_kw):
    from .session import connect
    s = connect(host.url, **connect_kw)
    s.fleet_host = host
    s.fleet_device = s.device(dev["id"])
    return s


def connect(url, device=None, password=None, username=None, insecure_tcp=False, trusted_keys=None,
            **connect_kw):
    """A session on the least loaded host serving ``device`` (a kind: 'cuda', 'hsa'/'rocm',
    'gpu', 'cpu'; or an id like 'cuda:1'); ``s.fleet_device`` is the device chosen and
    ``s.fleet_host`` the host's record. Hosts that do not answer are skipped, and so, when a
    credential goes along, are ``tcp:`` hosts unless ``insecure_tcp`` (the module's docstring).
    ``trusted_keys``: as ``hosts``. ``connect_kw`` go to kiln.connect (token, tls_ca, ...)."""
    tried = []
    found = placements(url, device, password=password, username=username, trusted_keys=trusted_keys)
    for host, dev in _trusted(found, connect_kw, insecure_tcp):
        try:
            return _open(host, dev, connect_kw)
        except Unavailable as e:
            tried.append("%s: %s" % (host.url, e.message))
    raise Unavailable("no host of the fleet at %s serves %s%s" % (
        url, device or "any device", (" (" + "; ".join(tried) + ")") if tried else ""))


def sessions(url, device_kind=None, password=None, username=None, insecure_tcp=False, trusted_keys=None,
             **connect_kw):
    """One session per matching device of every live host (fan-out), least loaded first;
    each has ``fleet_device``. Hosts that do not answer are left out, and so are ``tcp:``
    hosts when a credential goes along, unless ``insecure_tcp`` (as ``connect``)."""
    out = []
    found = placements(url, device_kind, password=password, username=username, trusted_keys=trusted_keys)
    for host, dev in _trusted(found, connect_kw, insecure_tcp):
        try:
            out.append(_open(host, dev, connect_kw))
        except Unavailable:
            continue
    return out


def runners(url, device_kind=None, **kw):
    """``sessions`` as kiln.autotune's runners: [(session, device)], so a tuning run
    measures its trials on every matching device of the fleet:
    ``kiln.autotune.tune(task, kiln.fleet.runners(url, "cuda"), ...)``."""
    return [(s, s.fleet_device) for s in sessions(url, device_kind, **kw)]


def format_table(hs):
    lines = ["%-28s %-10s %-10s %-18s %s" % ("HOST", "VERSION", "COMPILES", "IDENTITY", "DEVICES")]
    for h in hs:
        devs = ", ".join("%s(%s%s, %d running)" % (d["id"], d.get("arch", ""), ", leased" if d.get("leased") else "",
                                                   d.get("launches", 0)) for d in h.devices)
        ident = (h.identity.rsplit("build ", 1)[-1] if "build " in h.identity else h.identity)[:16]
        lines.append("%-28s %-10s %-10s %-18s %s" % (
            h.url, h.version, "%d/%d+%d" % (h.compile["busy"], h.compile["workers"], h.compile["queued"]),
            ident + (" *" if h.identity_differs else ""), devs))
    differ = [h for h in hs if h.identity_differs]
    if differ:
        lines.append("* compiler identity differs from most hosts' (their builds are not shared): " +
                     ", ".join("%s: %s" % (h.url, h.identity) for h in differ))
    return "\n".join(lines)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m kiln.fleet",
                                 description="Lists the hosts of a kiln fleet: devices, load, versions.")
    ap.add_argument("url", help="the registry: redis://HOST[:PORT][/DB] or unix:PATH[?db=N]")
    ap.add_argument("--device", default=None, help="only hosts serving this device kind")
    ap.add_argument("--trusted-keys", default=None, help="only records signed by these keys")
    args = ap.parse_args(argv)
    try:
        hs = hosts(args.url, trusted_keys=args.trusted_keys)
    except KilnError as e:
        print("kiln fleet: %s" % e, file=sys.stderr)
        return 3
    if args.device:
        hs = [h for h in hs if h.devices_of(args.device)]
    print(format_table(hs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
