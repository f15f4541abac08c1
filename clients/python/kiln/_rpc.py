"""MessagePack-RPC over one stream socket, many requests in flight (docs/protocol.md §1).

Whichever thread waits for a reply (``Future.result``) takes the *reader role* for a moment,
reads what has arrived and completes every future it finds a reply for, its own or another
thread's; threads that find the role taken wait on a condition until the reader hands it
back. A synchronous call therefore costs one send and one receive in the calling thread with
no thread switch (a reader thread in between adds ~80 us per round trip in CPython). Futures
that someone waits on without reading (done callbacks, concurrent.futures.wait, asyncio)
are *watched*: a reader thread per connection, started on demand, takes the role while any
is. A sender whose socket is full reads replies while it waits, so a client that pipelines
many requests cannot deadlock against the daemon's backpressure; the callbacks of what it
completes run in a callback thread meanwhile (the sender holds the send lock until its
whole body is out).

Fire-and-forget requests (the ``free`` of a collected tensor, ``Future.cancel``) never wait
for the send lock: sent at once when it is free, else queued and sent by the thread that
holds it once it is done (or by the next that reads). Their replies are read and dropped by
whoever reads next; ``close()`` waits for them briefly.
"""

import collections
import concurrent.futures as _cf
import errno
import itertools
import os
import select
import socket
import ssl
import struct
import threading
import time
import weakref

import msgpack

from .errors import (KilnError, Unavailable, InternalError, Timeout, InvalidArgument, Cancelled,
                     error_from_wire)

_RECV_SIZE = 4 << 20

# The value a sink future completes with: its bytes are already in the sink.
SINK_FILLED = object()
_MSGID_MASK = 0xFFFFFFFF
# A TLS socket says "not now" with its own exceptions.
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
# Plaintext per TLS send: a send that could not finish is retried with the same bytes, and
# OpenSSL wants the same length then too.
_TLS_CHUNK = 1 << 20


def parse_url(url):
    """``tcp:HOST:PORT`` (also ``tcp://HOST:PORT``, ``[v6]`` hosts), ``tls:HOST:PORT`` or
    ``unix:PATH`` (also ``unix://PATH``) -> ``("tcp", (host, port))``, ``("tls", (host,
    port))`` or ``("unix", path)``."""
    if not isinstance(url, str):
        raise InvalidArgument("a kiln url is a str like 'tcp:127.0.0.1:7070' or 'unix:/path', not %r" % (url,))
    if url.startswith("unix:"):
        path = url[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise InvalidArgument("url %r names no socket path" % url)
        return "unix", path
    if url.startswith("tcp:") or url.startswith("tls:"):
        kind, rest = url[:3], url[4:]
        if rest.startswith("//"):
            rest = rest[2:]
        rest = rest.rstrip("/")
        if rest.startswith("["):
            host, sep, port = rest[1:].partition("]:")
        else:
            host, sep, port = rest.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgument("url %r is not %s:HOST:PORT" % (url, kind))
        return kind, (host, int(port))
    raise InvalidArgument("url %r: kiln urls start with 'tcp:', 'tls:' or 'unix:'" % url)


def tls_context(ca=None, cert=None, key=None):
    """The client side of ``tls:`` URLs: TLS 1.3, the daemon's certificate checked against
    ``ca`` (a PEM file; default ``$KILN_TLS_CA``, else the system's CAs) and the URL's host;
    ``cert``/``key`` (default ``$KILN_TLS_CERT``/``$KILN_TLS_KEY``) for a daemon that asks
    for a client certificate."""
    ca = ca or os.environ.get("KILN_TLS_CA") or None
    cert = cert or os.environ.get("KILN_TLS_CERT") or None
    key = key or os.environ.get("KILN_TLS_KEY") or None
    try:
        ctx = ssl.create_default_context(cafile=ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise InvalidArgument("cannot load the TLS files (ca=%s, cert=%s, key=%s): %s" % (ca, cert, key, e)) from None
    return ctx


def _wrap_tls(sock, url, host, tls):
    ctx = tls if isinstance(tls, ssl.SSLContext) else tls_context(**(tls or {}))
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        sock.close()
        raise Unavailable("TLS handshake with %s failed: the daemon's certificate is not trusted (%s); "
                          "give its CA with tls_ca= or KILN_TLS_CA" % (url, e.verify_message)) from None
    except (ssl.SSLError, OSError) as e:
        sock.close()
        raise Unavailable("TLS handshake with %s failed: %s" % (url, e)) from None


def _proc_net_address(sockaddr, family, mapped):
    """An address as /proc/net/tcp{,6} prints it: each 32-bit word as stored (network order)
    printed as a native integer in hex, then the port; ``mapped``: an IPv4 address in its
    IPv4-mapped IPv6 form (a listener on [::] accepts 127.0.0.1 as ::ffff:127.0.0.1)."""
    raw = socket.inet_pton(family, sockaddr[0])
    if family == socket.AF_INET and mapped:
        raw = b"\0" * 10 + b"\xff\xff" + raw
    return "".join("%08X" % w for w in struct.unpack("=%dI" % (len(raw) // 4), raw)) + ":%04X" % sockaddr[1]


def _tcp_peer_uid(sock):
    """The uid of the daemon's end of a connected TCP socket (an accepted socket has its
    listener's owner), from the kernel's table of this network namespace; None if not found,
    "remote" for a daemon on another machine (not loopback, not in the table)."""
    import ipaddress
    fam = sock.family
    mine, theirs = sock.getsockname(), sock.getpeername()
    ip = ipaddress.ip_address(theirs[0])
    loopback = ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)
    for six in ((True,) if fam == socket.AF_INET6 else (False, True)):
        want = (_proc_net_address(theirs, fam, six), _proc_net_address(mine, fam, six))
        try:
            with open("/proc/net/tcp6" if six else "/proc/net/tcp") as f:
                for line in f:
                    p = line.split()
                    if len(p) > 7 and (p[1].upper(), p[2].upper()) == want:
                        return int(p[7])
        except OSError:
            pass
    return None if loopback else "remote"


def check_owner(sock, url):
    """For a daemon found by searching, not named by the user: raises Unavailable unless it
    runs as root or this user (a unix socket's SO_PEERCRED, a TCP
    port's owner in /proc/net/tcp). Anyone may listen first on a loopback port, or on a socket
    in a directory they own, and wait for another user's kernels, inputs and token
    (docs/protocol.md §1). Called before anything is sent; tls: URLs are left to their
    certificate, a ``$KILN_SEARCH`` host on another machine to the user who listed it."""
    if url.startswith("unix:"):
        uid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    elif url.startswith("tcp:"):
        uid = _tcp_peer_uid(sock)
        if uid == "remote":
            return
    else:
        return
    import pwd
    trusted = {0, os.geteuid()}  # root (the system daemon) and the caller: kiln makes no user of its own
    if uid in trusted:
        return
    if uid is None:
        who = "cannot tell which user runs it"
    else:
        try:
            who = "it runs as uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
        except KeyError:
            who = "it runs as uid %d" % uid
    raise Unavailable("%s: not used: %s, not as you (uid %d), or root, and another user's daemon "
                      "would receive your kernels, data and token; set KILN_URL=%s to use it anyway"
                      % (url, who, os.geteuid(), url))


def open_socket(url, timeout=10.0, tls=None, owner_check=False):
    """A connected, non-blocking socket; for ``tls:`` URLs an ``ssl.SSLSocket`` after its
    handshake. ``tls``: an ``ssl.SSLContext``, or a dict of ``tls_context`` arguments.
    ``owner_check``: ``check_owner`` before returning it (a daemon found by searching)."""
    kind, addr = parse_url(url)
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            if owner_check:
                check_owner(sock, url)
        except BaseException:
            sock.close()
            raise
    else:
        sock = socket.create_connection(addr, timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if owner_check and kind == "tcp":
            try:
                check_owner(sock, url)
            except BaseException:
                sock.close()
                raise
        if kind == "tls":
            sock = _wrap_tls(sock, url, addr[0], tls)
    sock.setblocking(False)
    return sock


# Every open connection, for the fork handler.
_live = weakref.WeakSet()


def _after_fork_in_child():
    for conn in list(_live):
        conn._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def bin_header(n):
    if n < 0x100:
        return b"\xc4" + bytes((n,))
    if n < 0x10000:
        return b"\xc5" + struct.pack(">H", n)
    if n <= 0xFFFFFFFF:
        return b"\xc6" + struct.pack(">I", n)
    raise InvalidArgument("%d bytes do not fit one MessagePack bin (4 GiB - 1); send them in chunks" % n)


def map_header(n):
    if n < 16:
        return bytes((0x80 | n,))
    return b"\xde" + struct.pack(">H", n)


_DONE_STATES = (_cf._base.CANCELLED, _cf._base.CANCELLED_AND_NOTIFIED, _cf._base.FINISHED)


class _Waiters(list):
    """A future's ``_waiters`` (concurrent.futures.wait and as_completed add theirs here):
    a waiter there means someone waits without reading, so the session's reader thread must."""

    __slots__ = ("fut",)

    def append(self, waiter):
        super().append(waiter)
        self.fut._watch()


# One lock guards the state of every future of a connection (an RLock: concurrent.futures.wait
# takes each future's _condition in turn). Nothing waits on the condition itself: result()
# reads replies, and other waiters are concurrent.futures' own waiter objects.
_NO_CONN_COND = threading.Condition(threading.RLock())


class Future(_cf.Future):
    """The pending result of one request, a ``concurrent.futures.Future``.

    ``result(timeout)`` and ``exception(timeout)`` read replies in the calling thread while
    they wait (no thread switch). Whoever waits without reading (``add_done_callback``,
    ``concurrent.futures.wait``/``as_completed``, ``asyncio.wrap_future`` or ``await``) starts
    the session's reader thread, which completes futures as their replies arrive and stops
    when nobody waits so. ``done()`` reads what has arrived when no thread is reading.
    Callbacks run in the thread that read the reply, after it stopped reading (or, when a
    sender read it, in a callback thread), so they may make blocking calls on the session."""

    # What concurrent.futures.Future.__init__ makes per future (a Condition, two lists) costs
    # more than the rest of a request: the lock is the connection's, the lists come when used.
    _state = _cf._base.PENDING
    _result = None
    _exception = None
    _done_callbacks = ()
    _watched = False
    _sink = None
    msgid = None
    on_progress = None  # fn(params) for the daemon's `progress` notifications of it

    def __init__(self, conn, method=None, transform=None):  # noqa: super().__init__ on purpose not called
        self._conn = conn
        self._transform = transform
        self.method = method

    @property
    def _condition(self):
        return self._conn._futures_cond if self._conn is not None else _NO_CONN_COND

    @property
    def _waiters(self):
        w = self.__dict__.get("_waiter_list")
        if w is None:
            w = _Waiters()
            w.fut = self
            w = self.__dict__.setdefault("_waiter_list", w)
        return w

    def _finished(self):
        return self._state in _DONE_STATES

    def done(self):
        if self._state not in _DONE_STATES and self._conn is not None:
            self._conn._poll_now()
        return self._state in _DONE_STATES

    def cancelled(self):
        """Whether the request was cancelled (``cancel()``, or the daemon answered E_CANCELLED)."""
        return self._state in _DONE_STATES and isinstance(self._exception, Cancelled)

    def cancel(self):
        """Sends ``cancel`` for a pending ``compile`` or ``compile_batch`` (the daemon drops
        its compile work that is still queued; running builds finish) and returns at once,
        without waiting for the daemon: asyncio calls it from its event loop when a task
        awaiting the future is cancelled, and the daemon may be the thing that hangs.

        A pending ``compile`` is cancelled here and now: True, ``cancelled()``, and
        ``result()`` raises ``kiln.Cancelled`` (a ``concurrent.futures.CancelledError``); the
        daemon's late answer is read and dropped, and ``sync()`` still waits for it (a build
        already running keeps the tenant's compiles quota until it ends). A ``compile_batch`` cannot be cancelled as a
        whole (False): it still completes, with a ``kiln.Cancelled`` for each item the daemon
        dropped. False also for a finished request and for other methods, which cannot be
        cancelled."""
        if self._finished() or self.msgid is None or self.method not in ("compile", "compile_batch"):
            return False
        conn = self._conn
        conn.fire_and_forget("cancel", {"msgid": self.msgid})  # its answer is read and dropped
        if self.method == "compile":
            # The future stays in _pending: a running build holds the tenant's compiles quota
            # until it ends, so sync()/close() must still wait for its late answer, which
            # _dispatch pops and hands to _complete, a no-op on a finished future. _complete
            # is first-wins under the future's condition, so a reply read by another thread at
            # this moment either wins (then this is not a cancellation: False) or is dropped.
            self._complete(None, Cancelled("cancelled by the client (its late answer is dropped)"))
            return self.cancelled()
        return False

    def _wait(self, timeout):
        if self._state in _DONE_STATES:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._conn._pump(self._finished, deadline):
            raise Timeout("no reply to %r within %.3g s (the request is still in flight)" % (self.method, timeout))
        if self._state not in _DONE_STATES:  # the connection died before this request was registered
            self._complete(None, self._conn._dead or Unavailable("the connection to kilnd is closed"))

    def result(self, timeout=None):
        self._wait(timeout)
        if self._exception is not None:
            try:
                raise self._exception
            finally:
                self = None  # no reference cycle through the traceback
        return self._result

    def exception(self, timeout=None):
        self._wait(timeout)
        return self._exception

    def add_done_callback(self, fn):
        """Calls ``fn(future)`` when the future completes (at once if it has): in the
        session's reader thread (started for it) or whichever thread read the reply (a
        callback thread when a sender read it)."""
        self._watch()
        self._add_callback(fn)

    def _add_callback(self, fn):
        with self._condition:
            if self._state not in _DONE_STATES:
                if not self._done_callbacks:
                    self._done_callbacks = []
                self._done_callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            _cf._base.LOGGER.exception("exception calling callback for %r", self)

    def __await__(self):
        import asyncio
        return asyncio.wrap_future(self).__await__()

    def _watch(self):
        conn = self._conn
        if conn is not None and not self._watched:
            conn._watch(self)

    def _invoke_callbacks(self):
        conn = self._conn
        if self._done_callbacks and conn is not None and conn._reader_ident == threading.get_ident():
            conn._deferred.append(self)  # after the reader role is handed back
            return
        super()._invoke_callbacks()

    def _complete(self, value, exc):
        if self._state in _DONE_STATES:
            return
        if exc is None and self._transform is not None:
            try:
                value = self._transform(value)
            except KilnError as e:
                exc, value = e, None
            except Exception as e:  # a transform bug must still complete the future
                exc, value = e, None
        with self._condition:
            if self._state in _DONE_STATES:  # another thread completed it just now
                return
            self._result, self._exception = value, exc
            self._state = _cf._base.FINISHED
            waiters = self.__dict__.get("_waiter_list")
            if waiters:
                for w in waiters:
                    if exc is None:
                        w.add_result(self)
                    else:
                        w.add_exception(self)
        if self._done_callbacks:
            self._invoke_callbacks()
        if self._watched:
            self._conn._unwatch(self)

    def set_result(self, result):
        self._complete(result, None) if self._state not in _DONE_STATES else self._invalid()

    def set_exception(self, exception):
        self._complete(None, exception) if self._state not in _DONE_STATES else self._invalid()

    def _invalid(self):
        raise _cf.InvalidStateError("%r is done already" % self)

    def __repr__(self):
        state = "pending"
        if self._state in _DONE_STATES:
            state = "error" if self._exception is not None else "done"
        return "<kiln.Future %s %s>" % (self.method, state)


class CombinedFuture(Future):
    """A future over other futures (a chunked transfer): done when all are; ``combine``
    maps their results to this one's. The first error wins."""

    def __init__(self, conn, parts, combine, method=None):
        super().__init__(conn, method)
        self._parts = list(parts)
        self._combine = combine
        if not self._parts:
            self._finish()
        for p in self._parts:
            p._add_callback(self._part_done)  # not a watcher: a reader of this one is

    def _watch(self):
        for p in self._parts:
            p._watch()

    def _part_done(self, _):
        if self._state not in _DONE_STATES and all(p._state in _DONE_STATES for p in self._parts):
            self._finish()

    def _finish(self):
        for p in self._parts:
            if p._exception is not None:
                self._complete(None, p._exception)
                return
        try:
            value = self._combine([p._result for p in self._parts])
        except Exception as e:
            self._complete(None, e)
            return
        self._complete(value, None)


def completed_future(conn, value=None, exc=None, method=None):
    f = Future(conn, method)
    f._complete(value, exc)
    return f


class Connection:
    """One socket to kilnd. Thread-safe: any thread may send and wait."""

    def __init__(self, url, timeout=10.0, tls=None, owner_check=False):
        self.url = url
        self._sock = open_socket(url, timeout, tls, owner_check)
        self._tls = isinstance(self._sock, ssl.SSLSocket)
        self._fd = self._sock.fileno()
        self._poller = select.poll()  # used by the reader-role holder only
        self._poller.register(self._fd, select.POLLIN)
        self._ids = itertools.count(1)
        self._pending = {}          # msgid -> Future, or None for fire-and-forget requests
        self._spoke = False         # a MessagePack-RPC message arrived: the peer is a kilnd
        self._send_lock = threading.Lock()
        # The reader role is a plain lock: an uncontended synchronous call takes it without
        # touching the condition. Threads that find it taken wait on the condition; the reader
        # notifies only when someone waits (_waiters, changed under the condition's lock).
        self._read_lock = threading.Lock()
        self._state = threading.Condition(threading.Lock())
        self._waiters = 0
        self._dead = None           # the exception every later call gets
        self._server_error = None   # from an "error" notification, reported when the stream ends
        self._backlog = collections.deque()  # fire-and-forget messages waiting for the send lock
        self._leftover = b""        # bytes of a message partly sent by a non-blocking flush
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False,
                                          unicode_errors="surrogateescape",
                                          max_buffer_size=0x7FFFFFFF)
        self._rbuf = bytearray(_RECV_SIZE)
        self._rview = memoryview(self._rbuf)
        self._fed = 0               # bytes fed to the unpacker so far
        self._boundary = 0          # unpacker offset just after the last whole message
        self._sinks = 0             # pending requests whose reply may go to a sink
        self.on_notification = None  # fn(method, params) for notifications other than "error"
        self._futures_cond = threading.Condition(threading.RLock())  # Future._condition
        self._reader_ident = None   # the thread holding the reader role
        # completed futures whose callbacks run once the role is free (a deque: whoever runs
        # them pops one at a time, so no thread loses another's)
        self._deferred = collections.deque()
        self._watched = 0           # pending futures someone waits on without reading
        self._reader_on = False     # the reader thread runs (changed under _state)
        self._runner_on = False     # a callback thread runs (changed under _state)
        self._pid = os.getpid()
        _live.add(self)

    # -- sending ---------------------------------------------------------------------------

    def next_msgid(self):
        return next(self._ids) & _MSGID_MASK

    def request(self, method, params, transform=None, tail=None, sink=None):
        """Sends ``[0, msgid, method, [params]]`` and returns its Future. With ``tail``
        (key, buffer), the params map gets one more field ``key`` whose bin value is
        ``buffer``, sent from the caller's memory without a copy. With ``sink`` (a
        writable byte memoryview), a bin result of exactly its size may be received
        straight into it; the transform then sees SINK_FILLED instead of bytes."""
        if self._dead is not None:
            raise self._dead
        msgid = self.next_msgid()
        fut = Future(self, method, transform)
        fut.msgid = msgid
        if sink is not None:
            fut._sink = sink
            self._sinks += 1
        if tail is None:
            bufs = [msgpack.packb([0, msgid, method, [params]], use_bin_type=True)]
        else:
            bufs = self._pack_with_tail(msgid, method, params, tail)
        self._pending[msgid] = fut
        try:
            self._send(bufs)
        except BaseException:
            if self._pending.pop(msgid, None) is not None and sink is not None:
                self._sinks -= 1
            raise
        return fut

    @staticmethod
    def _pack_with_tail(msgid, method, params, tail):
        key, buf = tail
        view = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else memoryview(buf)
        head = bytearray(b"\x94")
        head += msgpack.packb(0) + msgpack.packb(msgid) + msgpack.packb(method)
        head += b"\x91" + map_header(len(params) + 1)
        for k, v in params.items():
            head += msgpack.packb(k, use_bin_type=True) + msgpack.packb(v, use_bin_type=True)
        head += msgpack.packb(key) + bin_header(len(view))
        return [bytes(head), view]

    def send_raw_later(self, data):
        """Queues one complete fire-and-forget message (bytes) and tries to send it now
        without blocking. Safe from __del__: takes no lock that it could already hold."""
        if self._dead is not None:
            return
        self._backlog.append(data)
        if self._send_lock.acquire(False):
            try:
                self._flush_nonblocking()
            except OSError as e:
                self._lost(e)
            finally:
                self._send_lock.release()

    def fire_and_forget(self, method, params):
        msgid = self.next_msgid()
        self._pending[msgid] = None
        self.send_raw_later(msgpack.packb([0, msgid, method, [params]], use_bin_type=True))

    def _take_backlog(self):
        out = []
        if self._leftover:
            out.append(self._leftover)
            self._leftover = b""
        while self._backlog:
            try:
                out.append(self._backlog.popleft())
            except IndexError:
                break
        return out

    def _flush_nonblocking(self):
        bufs = self._take_backlog()
        if not bufs:
            return
        data = b"".join(bufs)
        try:
            n = self._sock.send(data[:_TLS_CHUNK] if self._tls else data)
        except _WOULD_BLOCK:
            n = 0
        self._leftover = data[n:]

    def _send(self, bufs):
        try:
            self._send_locked(bufs)
        finally:
            # fire-and-forget messages queued while this thread held the lock (a cancel)
            if (self._backlog or self._leftover) and self._dead is None and self._send_lock.acquire(False):
                try:
                    self._flush_nonblocking()
                except OSError:
                    pass  # the next send or read reports it
                finally:
                    self._send_lock.release()

    def _send_locked(self, bufs):
        with self._send_lock:
            if self._dead is not None:
                raise self._dead
            if self._backlog or self._leftover:
                bufs = self._take_backlog() + bufs
            try:
                if len(bufs) == 1 and not (self._tls and len(bufs[0]) > _TLS_CHUNK):
                    # the common case: one small request, sent whole at once
                    try:
                        n = self._sock.send(bufs[0])
                    except _WOULD_BLOCK:
                        n = 0
                    if n == len(bufs[0]):
                        return
                    bufs = [memoryview(bufs[0])[n:]]
                self._send_all(bufs)
            except OSError as e:
                self._salvage()  # the daemon may have said why it closed (an "error" notification)
                exc = self._server_error or Unavailable(
                    "the connection to kilnd at %s failed while sending: %s" % (self.url, e))
                self._die(exc)
                raise self._dead from None

    def _send_all(self, bufs):
        views = [memoryview(b).cast("B") if not isinstance(b, memoryview) else b for b in bufs]
        views = [v for v in views if len(v)]
        sock = self._sock
        while views:
            try:
                if self._tls:  # no sendmsg on TLS sockets
                    n = sock.send(views[0][:_TLS_CHUNK])
                else:
                    n = sock.sendmsg(views[:512])
            except _WOULD_BLOCK:
                self._wait_writable()
                continue
            while n:
                v = views[0]
                if n >= len(v):
                    n -= len(v)
                    views.pop(0)
                else:
                    views[0] = v[n:]
                    n = 0

    def _salvage(self):
        """After a failed send: reads what the daemon sent before it closed, without waiting
        long, so that its error notification becomes the reported error."""
        if self._dead is not None or not self._take_reader():
            return
        try:
            for _ in range(64):
                if self._dead is not None:
                    break
                p = select.poll()
                p.register(self._fd, select.POLLIN)
                if not p.poll(100):
                    break
                self._read_once(0)
        except Exception:
            pass
        finally:
            self._release_reader(run=False)  # the caller holds the send lock

    def _take_reader(self):
        if not self._read_lock.acquire(False):
            return False
        self._reader_ident = threading.get_ident()
        return True

    def _release_reader(self, run=True):
        """Hands the reader role back, then runs the callbacks of the futures completed
        meanwhile (never while holding the role or the send lock: a callback may make a
        blocking call on this session). A sender (``run`` false) holds the send lock until
        its whole body is out, which may be long: a callback thread runs them now instead."""
        self._reader_ident = None
        self._read_lock.release()
        if self._waiters:
            with self._state:
                self._state.notify_all()
        if self._deferred:
            if run:
                self._run_deferred()
            else:
                self._hand_deferred()

    def _run_deferred(self):
        d = self._deferred
        while True:
            try:
                fut = d.popleft()
            except IndexError:
                return
            _cf.Future._invoke_callbacks(fut)

    def _hand_deferred(self):
        """Starts the callback thread unless one runs; it ends when nothing is deferred."""
        with self._state:
            if self._runner_on:
                return  # it looks at the queue again, under this lock, before it ends
            self._runner_on = True
        threading.Thread(target=self._runner_main, name="kiln-callbacks %s" % self.url, daemon=True).start()

    def _runner_main(self):
        while True:
            self._run_deferred()
            with self._state:
                if not self._deferred:
                    self._runner_on = False
                    return

    def _poll_now(self):
        """Reads what has arrived, without waiting, when no thread is reading (``done()``)."""
        if self._dead is not None or self._reader_ident == threading.get_ident() or not self._take_reader():
            return
        try:
            self._read_once(0)
        finally:
            self._release_reader()

    # -- the reader thread -----------------------------------------------------------------

    def _watch(self, fut):
        """``fut`` has a waiter that does not read (a callback, concurrent.futures.wait,
        asyncio): the reader thread reads until it completes."""
        with self._state:
            if fut._watched:
                return
            fut._watched = True
            self._watched += 1
            # checked after the flag is set: a completion that does not see the flag set has
            # set its state before this check, so nothing stays watched
            if fut._state in _DONE_STATES:
                fut._watched = False
                self._watched -= 1
                return
            if self._dead is not None:
                return
            if not self._reader_on:
                self._reader_on = True
                threading.Thread(target=self._reader_main, name="kiln-reader %s" % self.url,
                                 daemon=True).start()
            else:
                self._state.notify_all()

    def _unwatch(self, fut):
        if fut._watched:
            with self._state:
                if fut._watched:
                    fut._watched = False
                    self._watched -= 1

    def _reader_main(self):
        """Reads while some future is watched; after a second with none it ends (a later
        watch starts it again), so an idle session holds no thread."""
        while True:
            with self._state:
                if self._watched == 0 and self._dead is None:
                    self._state.wait(1.0)
                if self._dead is not None or self._watched == 0 or os.getpid() != self._pid:
                    self._reader_on = False
                    return
            self._pump(lambda: self._watched == 0, None)

    def _wait_writable(self):
        """The socket is full: wait until it drains, reading replies meanwhile when no
        other thread is (the daemon stops reading a client that leaves its replies unread)."""
        take = self._dead is None and self._reader_ident != threading.get_ident() and self._take_reader()
        try:
            p = select.poll()
            p.register(self._fd, select.POLLOUT | (select.POLLIN if take else 0))
            for _, ev in p.poll(1000):
                if take and ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    self._read_once(0)
                if self._dead is not None:
                    raise self._dead
        finally:
            if take:
                self._release_reader(run=False)  # the caller holds the send lock

    # -- receiving -------------------------------------------------------------------------

    def _pump(self, done, deadline):
        """Reads and dispatches replies until ``done()`` is true. False when the deadline
        (time.monotonic()) passed first."""
        if self._reader_ident == threading.get_ident():
            raise RuntimeError("a blocking call on a kiln session from inside its on_progress or "
                               "on_notification hook would wait forever (the hook runs while its "
                               "thread reads the socket); use a done callback or another thread")
        while not done():
            if self._dead is not None:
                return True  # every future has failed; done() is true for the caller's
            if not self._take_reader():
                if not self._wait_for_reader(done, deadline):
                    return False
                continue
            try:
                if deadline is None:
                    self._read_once(None)
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return done()
                    self._read_once(left)
            finally:
                self._release_reader()
        return True

    def _wait_for_reader(self, done, deadline):
        """Another thread reads: wait until it completes ``done`` or hands the role over.
        False when the deadline passed."""
        with self._state:
            self._waiters += 1
            try:
                while not done() and self._dead is None:
                    if self._read_lock.acquire(False):
                        self._read_lock.release()  # free now: the caller takes it in _pump
                        return True
                    if deadline is None:
                        self._state.wait()
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return False
                        self._state.wait(left)
                return True
            finally:
                self._waiters -= 1

    def _read_once(self, timeout):
        """Reads what has arrived (waiting up to ``timeout`` seconds, None = forever, for
        the first byte) and dispatches every complete message. Caller holds the reader role."""
        if (self._backlog or self._leftover) and self._send_lock.acquire(False):
            try:
                self._flush_nonblocking()
            except OSError:
                pass
            finally:
                self._send_lock.release()
        # poll, then recv: a synchronous call's answer is rarely there yet, and a failed
        # non-blocking recv costs a Python exception
        ms = -1 if timeout is None else max(0, int(timeout * 1000 + 0.999))
        try:
            # decrypted bytes may wait inside the TLS socket, where poll() cannot see them
            if not (self._tls and self._sock.pending()) and not self._poller.poll(ms):
                return
            n = self._sock.recv_into(self._rbuf)
        except _WOULD_BLOCK:
            return
        except ssl.SSLEOFError:
            n = 0
        except OSError as e:
            self._lost(e)
            return
        if n == 0:
            # kilnd answers every connection it refuses: a peer that closes without a word is
            # another service (an HTTP server gives up waiting for a request head)
            exc = self._server_error or (Unavailable(
                "kilnd at %s closed the connection (it may have stopped; reconnect with kiln.connect)"
                % self.url) if self._spoke else Unavailable(
                "%s closed the connection without answering: it is not a kilnd RPC port (or kilnd "
                "stopped just then); check the URL (kilnd's metrics port is not its RPC port)" % self.url))
            self._die(exc)
            return
        pos = 0
        if self._sinks and self._boundary == self._fed:
            while pos < n and self._dead is None:
                nxt = self._try_sink(pos, n)
                if nxt is None:
                    break
                pos = nxt
            if pos >= n or self._dead is not None:
                return
        up = self._unpacker
        try:
            up.feed(self._rview[pos:n])
            self._fed += n - pos
            for msg in up:
                self._boundary = up.tell()
                self._dispatch(msg)
        except (ValueError, msgpack.UnpackException) as e:
            if not self._spoke:  # another service answers there: the user's URL, not a kiln bug
                http = " (it speaks HTTP)" if bytes(self._rview[:5]) == b"HTTP/" else ""
                self._die(Unavailable("%s is not a kilnd RPC port: what answered there does not speak "
                                      "MessagePack-RPC%s; check the URL (kilnd's metrics port is not "
                                      "its RPC port)" % (self.url, http)))
            else:
                self._die(InternalError("kilnd sent bytes that are not MessagePack-RPC (%s); please report it" % e))

    def _try_sink(self, pos, n):
        """Fast path for a large ``read`` reply: when the bytes at ``pos`` (a message
        boundary) start ``[1, msgid, nil, <bin>]`` and the request for msgid gave a sink of
        that size, the bin goes straight from the socket into the sink (the caller's numpy
        array) without passing through the unpacker. Returns the position after what it
        consumed in the receive buffer, or None to let the unpacker take the message."""
        b = self._rbuf
        if n - pos < 16 or b[pos] != 0x94 or b[pos + 1] != 0x01:
            return None
        i = pos + 2
        t = b[i]
        if t <= 0x7F:
            msgid, i = t, i + 1
        elif t == 0xCC:
            msgid, i = b[i + 1], i + 2
        elif t == 0xCD:
            msgid, i = int.from_bytes(b[i + 1:i + 3], "big"), i + 3
        elif t == 0xCE:
            msgid, i = int.from_bytes(b[i + 1:i + 5], "big"), i + 5
        else:
            return None
        if b[i] != 0xC0:
            return None
        t = b[i + 1]
        if t == 0xC6:
            size, i = int.from_bytes(b[i + 2:i + 6], "big"), i + 6
        elif t == 0xC5:
            size, i = int.from_bytes(b[i + 2:i + 4], "big"), i + 4
        else:
            return None
        fut = self._pending.get(msgid)
        sink = getattr(fut, "_sink", None) if fut else None
        if sink is None or len(sink) != size:
            return None
        avail = min(n - i, size)
        sink[:avail] = self._rview[i:i + avail]
        got = avail
        sock = self._sock
        p = None
        while got < size:
            try:
                k = sock.recv_into(sink[got:])
            except ssl.SSLEOFError:
                k = 0
            except _WOULD_BLOCK:
                if p is None:
                    p = select.poll()
                    p.register(self._fd, select.POLLIN)
                p.poll(1000)
                continue
            except OSError as e:
                self._lost(e)
                return n
            if k == 0:
                self._die(self._server_error or Unavailable("kilnd at %s closed the connection" % self.url))
                return n
            got += k
        self._pending.pop(msgid, None)
        self._sinks -= 1
        fut._sink = None
        fut._complete(SINK_FILLED, None)
        return i + avail

    def _dispatch(self, msg):
        if not isinstance(msg, (list, tuple)) or not msg:
            raise ValueError("message is not an array: %r" % (msg,))
        kind = msg[0]
        if kind in (1, 2) and len(msg) == 4 - (kind == 2):
            self._spoke = True
        if kind == 1 and len(msg) == 4:
            fut = self._pending.pop(msg[1], False)
            if fut is False or fut is None:
                return  # fire-and-forget (or unknown) request: nothing waits for it
            if fut._sink is not None:
                fut._sink = None
                self._sinks -= 1
            err = msg[2]
            if err is None:
                fut._complete(msg[3], None)
            else:
                fut._complete(None, error_from_wire(err))
        elif kind == 2 and len(msg) == 3:
            method, params = msg[1], msg[2]
            if isinstance(method, bytes):
                method = method.decode("utf-8", "replace")
            if method == "error":
                body = params[0] if isinstance(params, (list, tuple)) and params else params
                self._server_error = error_from_wire(body)
            else:
                self._progress(method, params)
                if self.on_notification is not None:
                    try:
                        self.on_notification(method, params)
                    except Exception:
                        pass
        else:
            raise ValueError("unexpected message %r" % (msg[:2],))

    def _progress(self, method, params):
        """A `progress` notification goes to its request's Future.on_progress too."""
        if method != "progress" or not isinstance(params, (list, tuple)) or not params:
            return
        body = params[0]
        fut = self._pending.get(body.get("msgid")) if isinstance(body, dict) else None
        if fut is not None and fut.on_progress is not None:
            try:
                fut.on_progress(body)
            except Exception:
                pass

    def _lost(self, oserror):
        self._die(self._server_error or Unavailable("the connection to kilnd at %s failed: %s" % (self.url, oserror)))

    def _die(self, exc):
        with self._state:
            if self._dead is not None:
                return
            self._dead = exc
            self._state.notify_all()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if fut is not None:
                fut._complete(None, exc)
        try:
            # shutdown first: a thread blocked in poll() on this socket wakes up (close alone
            # would leave it waiting forever)
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass

    # -- life ------------------------------------------------------------------------------

    def _after_fork_in_child(self):
        """In a child process: the socket is the parent's (its replies are read there), so
        every use of this connection fails; the child closes only its copy of the descriptor
        (a shutdown would cut the parent's connection too)."""
        self._read_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._state = threading.Condition(threading.Lock())
        self._reader_ident, self._deferred, self._waiters = None, collections.deque(), 0
        self._watched, self._reader_on, self._runner_on = 0, False, False
        self._backlog.clear()
        self._leftover = b""
        if self._dead is None:
            self._dead = Unavailable("this kiln session belongs to process %d; a forked child must "
                                     "connect again (kiln.connect())" % self._pid)
        self._pending = {}  # their futures are the parent's; waiting on one here raises _dead
        try:
            self._sock.close()
        except OSError:
            pass

    @property
    def closed(self):
        return self._dead is not None

    def inflight(self):
        return len(self._pending)

    def drain(self, timeout=None):
        """Waits until every request sent so far (fire-and-forget ones too) has its reply."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._backlog or self._leftover:
            self._send([])
        return self._pump(lambda: not self._pending, deadline)

    def close(self, timeout=5.0):
        if self._dead is not None:
            return
        try:
            self.drain_fire_and_forget(timeout)
        except KilnError:
            pass
        self._die(Unavailable("this kiln session was closed"))

    def drain_fire_and_forget(self, timeout):
        if self._backlog or self._leftover:
            self._send([])
        deadline = time.monotonic() + timeout
        self._pump(lambda: not any(v is None for v in list(self._pending.values())), deadline)
