"""Sessions (one connection to kilnd) and devices."""

import os
import sys
import threading

from . import daemon as _daemon
from ._rpc import Connection, parse_url
from .errors import InvalidArgument, KilnError, Timeout, Unauthenticated, Unavailable

__all__ = ["Session", "Device", "connect", "default_session"]

CLIENT_NAME = "kiln-python/0.1.0"
PROTOCOL_VERSION = 1


class Device:
    """A device of the daemon, e.g. ``s.cpu(0)``, ``s.rocm(0)`` ("hsa:0"), ``s.cuda(0)``.
    A Device object exists whether or not the daemon serves it; ``exist`` says if it does.
    The other attributes come from the daemon's ``devices`` answer (None when absent)."""

    __slots__ = ("session", "id")

    def __init__(self, session, device_id):
        self.session = session
        self.id = device_id

    @property
    def info(self):
        """The daemon's map for this device, or None if it does not serve it."""
        return self.session._device_info().get(self.id)

    @property
    def exist(self):
        info = self.info
        return bool(info) and info.get("available", True) is not False

    @property
    def device_type(self):
        return self.id.partition(":")[0]

    kind = device_type

    @property
    def device_id(self):
        return int(self.id.partition(":")[2] or 0)

    def _field(self, name):
        info = self.info
        return None if info is None else info.get(name)

    name = property(lambda self: self._field("name"))
    arch = property(lambda self: self._field("arch"))
    memory = property(lambda self: self._field("memory"))
    compute_units = property(lambda self: self._field("compute_units"))
    max_block = property(lambda self: self._field("max_block"))
    wave_size = property(lambda self: self._field("wave_size"))
    max_shared = property(lambda self: self._field("max_shared"))
    # TVM's names
    device_name = name
    max_threads_per_block = max_block
    warp_size = wave_size
    multi_processor_count = compute_units
    max_shared_memory_per_block = max_shared

    def sync(self):
        """Waits until every request this session has sent so far is answered (requests on
        one device complete in order, so this covers every launch and copy sent before)."""
        self.session.sync()

    def empty(self, shape, dtype="float32"):
        from . import nd
        return nd.empty(shape, dtype, self)

    def array(self, obj, dtype=None):
        from . import nd
        return nd.array(obj, self, dtype)

    def __eq__(self, other):
        return isinstance(other, Device) and other.session is self.session and other.id == self.id

    def __hash__(self):
        return hash((id(self.session), self.id))

    def __str__(self):
        return self.id

    def __repr__(self):
        return "<kiln.Device %s%s>" % (self.id, "" if self.exist else " (absent)")


class Session:
    """One connection to kilnd. Thread-safe; many calls may be in flight (``*_async``).

    ``server``, ``tenant``, ``limits`` and ``version`` come from the ``hello`` answer.
    ``daemon`` is the private kilnd this session started, if any.
    """

    def __init__(self, url, token=None, client=None, timeout=10.0, daemon=None, tls=None,
                 tensors=None, owner_check=False):
        self.url = url
        self.daemon = daemon
        self._conn = Connection(url, timeout, tls, owner_check)
        self._devices = None
        self._devices_lock = threading.Lock()
        params = {"version": PROTOCOL_VERSION, "client": client or CLIENT_NAME}
        if token is not None:
            params["token"] = token
        if tensors is not None:  # "session": this session's tensors are freed when it closes
            params["tensors"] = tensors
        try:
            h = self._conn.request("hello", params).result(timeout)
        except Timeout:
            self._conn.close(0)
            if self._conn._spoke:
                raise
            # not a byte back: kilnd answers hello at once, an HTTP server waits for a head
            raise Unavailable("%s did not answer hello within %g s: it is not a kilnd RPC port (or "
                              "kilnd is stuck); check the URL (kilnd's metrics port is not its RPC "
                              "port)" % (url, timeout)) from None
        except BaseException:
            self._conn.close(0)
            raise
        self.hello_result = h
        self.server = h.get("server")
        self.version = h.get("version")
        self.tenant = h.get("tenant")
        self.limits = h.get("limits") or {}

    # -- generic calls ---------------------------------------------------------------------

    def call_async(self, method, params=None, **fields):
        """Sends any method with a params map (``params`` and/or keyword fields) and
        returns a Future of its raw result (a ``concurrent.futures.Future``, awaitable:
        ``await s.call_async("ping")``; every ``*_async`` method returns one)."""
        p = dict(params or {})
        p.update(fields)
        return self._conn.request(method, p)

    def call(self, method, params=None, **fields):
        """Calls any method and returns its raw result (or raises its KilnError)."""
        return self.call_async(method, params, **fields).result()

    def ping_async(self):
        return self._conn.request("ping", {})

    def ping(self):
        return self.ping_async().result()

    def stats_async(self):
        return self._conn.request("stats", {})

    def stats(self):
        return self.stats_async().result()

    def devices_async(self, absent=False):
        def wrap(lst):
            self._devices = {d["id"]: d for d in lst if isinstance(d, dict) and "id" in d}
            return [Device(self, d["id"]) for d in lst if isinstance(d, dict) and "id" in d
                    and d.get("available", True) is not False]
        params = {"absent": True} if absent else {}
        return self._conn.request("devices", params, transform=wrap)

    def devices(self):
        """The devices the daemon serves, as Device objects (refreshes ``dev.info``)."""
        return self.devices_async().result()

    def devices_info(self, absent=False):
        """The daemon's raw ``devices`` answer (with ``absent=True``, also the backends
        that found no device and why)."""
        return self.call("devices", {"absent": True} if absent else {})

    def _device_info(self):
        if self._devices is None:
            with self._devices_lock:
                if self._devices is None:
                    self.devices()
        return self._devices

    # -- devices ---------------------------------------------------------------------------

    def device(self, device_id):
        """A Device by id: "cpu:0", "hsa:0", "cuda:1". TVM's names work too: "rocm:0",
        "gpu:0" (the first GPU of any kind), "llvm"."""
        if isinstance(device_id, Device):
            return device_id
        if not isinstance(device_id, str):
            raise InvalidArgument("a device id is a str like 'cpu:0', not %r" % (device_id,))
        kind, _, n = device_id.partition(":")
        n = n or "0"
        kind = {"rocm": "hsa", "amd": "hsa", "llvm": "cpu", "host": "cpu", "nvidia": "cuda"}.get(kind, kind)
        if kind not in ("cpu", "hsa", "cuda", "gpu") or not n.isdigit():
            raise InvalidArgument("%r is not a device id: 'cpu:0', 'hsa:N', 'cuda:N' (also 'rocm:N', 'gpu:N', "
                                  "'llvm')" % device_id)
        if kind == "gpu":
            gpus = [d for d in self._device_info() if not d.startswith("cpu:")]
            if not gpus:
                return Device(self, "hsa:" + n)
            return Device(self, sorted(gpus)[int(n)] if int(n) < len(gpus) else "hsa:" + n)
        return Device(self, "%s:%s" % (kind, n))

    def cpu(self, n=0):
        return Device(self, "cpu:%d" % n)

    def rocm(self, n=0):
        return Device(self, "hsa:%d" % n)

    hsa = rocm

    def cuda(self, n=0):
        return Device(self, "cuda:%d" % n)

    def default_device(self):
        """The first GPU the daemon serves, else cpu:0."""
        ids = sorted(self._device_info(), key=lambda d: (d.startswith("cpu:"), d))
        for d in ids:
            if self._devices[d].get("available", True) is not False:
                return Device(self, d)
        return self.cpu(0)

    # -- modules ---------------------------------------------------------------------------

    def compile_async(self, ir, target=None, format=None, options=None, name=None):
        from .module import compile_params, Module
        params = compile_params(self, ir, target, format, options)
        tgt = params["target"]
        return self._conn.request("compile", params,
                                  transform=lambda r: Module(self, r, tgt, name=name))

    def compile(self, ir, target=None, format=None, options=None, name=None):
        """Compiles a payload (LLVM IR text or bitcode, a code object, or a path to a file
        holding one) for ``target`` (a Device, a device id, or a target name such as
        "cpu", "gfx942", "sm_90"; default "cpu:0", the protocol's default device) -> Module."""
        return self.compile_async(ir, target, format, options, name).result()

    def compile_batch_async(self, items, options=None, progress=None):
        from .module import compile_params, batch_results
        plist = []
        for it in items:
            if isinstance(it, dict):
                plist.append(compile_params(self, it.get("ir"), it.get("target"), it.get("format"),
                                            it.get("options", options)))
            elif isinstance(it, (tuple, list)):
                plist.append(compile_params(self, *it))
            else:
                plist.append(compile_params(self, it, None, None, options))
        targets = [p["target"] for p in plist]
        fut = self._conn.request("compile_batch", {"items": plist},
                                 transform=lambda r: batch_results(self, r, targets))
        fut.on_progress = progress
        return fut

    def compile_batch(self, items, options=None, progress=None):
        """Compiles many payloads in one request (a tuner's trial builds). ``items``: dicts
        ``{"ir", "target", "format"?, "options"?}``, tuples ``(ir, target)``, or payloads.
        Returns a list in item order holding a Module or, for an item that failed, the
        KilnError (not raised) describing why. ``progress(p)`` is called with each
        ``progress`` notification of the batch (``index``, ``done``, ``failed``, ``total``)."""
        return self.compile_batch_async(items, options, progress).result()

    # -- quotas and leases -----------------------------------------------------------------

    def quotas(self):
        """The tenant's own quotas: ``{"tenant", "limits": {name: int or None (unlimited)},
        "used": {name: int}}`` (docs/protocol.md ``quotas``)."""
        return self.call("quotas")

    def lease(self, device=None, seconds=None, wait=True):
        """Exclusive use of a device for clean measurements, as a context manager::

            with s.lease("cpu:0", 60) as l:   # l.id, l.device, l.seconds
                f.time(...)

        The lease is released when the block ends (or when it runs out after ``seconds``)."""
        return Lease(self, device, seconds, wait)

    def module(self, module_id, target=None):
        """The Module of a module id obtained earlier (by this tenant, also before a restart of
        a daemon with the same cache), with its kernel table from the daemon. Raises NotFound
        when the tenant never built it or the cache no longer holds it (compile it again)."""
        from .module import Module
        return Module(self, self.call("module", {"module": module_id}), target)

    def tensors(self, device=None):
        """The tenant's live tensors (all its sessions'), as the daemon lists them: dicts with
        ``id``, ``device``, ``dtype``, ``shape``, ``bytes``, ``age_s``, ``client`` (the hello
        name of the session that made it) and ``session`` (freed when that session closes).
        ``kiln.nd.NDArray.attach(session, id)`` makes an NDArray of one."""
        params = {} if device is None else {"device": str(device)}
        return self.call("tensors", params)

    def free_tensors(self, ids=None):
        """Frees the tenant's tensors ``ids`` (every one of them when None); returns how many
        went. An unknown id frees nothing and raises NotFound."""
        params = {"all": True} if ids is None else {"ids": [int(i) for i in ids]}
        return self.call("free", params)["freed"]

    def on_notification(self, fn):
        """Calls ``fn(method, params)`` for each notification the daemon sends (``progress``
        of long jobs), in whichever thread reads it, while that thread reads: a blocking call
        on this session from ``fn`` raises RuntimeError. ``error`` notifications are not
        passed: they become the exception of the requests that the closed connection fails."""
        self._conn.on_notification = fn

    # -- life ------------------------------------------------------------------------------

    def sync(self, timeout=None):
        """Waits until every request sent on this session so far has its answer."""
        self._conn.drain(timeout)

    @property
    def closed(self):
        return self._conn.closed

    def close(self):
        """Sends pending frees, waits briefly for their answers, closes the connection.
        Does not stop a private daemon (that happens at exit)."""
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<kiln.Session %s %s tenant=%s%s>" % (self.url, self.server, self.tenant,
                                                     " closed" if self.closed else "")


class Lease:
    """A device lease (``Session.lease``); taken on ``__enter__`` (or ``acquire()``),
    released on ``__exit__`` (or ``release()``)."""

    def __init__(self, session, device=None, seconds=None, wait=True):
        self.session = session
        self.device = getattr(device, "id", device)
        self.seconds = seconds
        self.wait = wait
        self.id = None

    def acquire(self):
        p = {"wait": bool(self.wait)}
        if self.device is not None:
            p["device"] = self.device
        if self.seconds is not None:
            p["seconds"] = int(self.seconds)
        r = self.session.call("lease", p)
        self.id, self.device, self.seconds = r["lease"], r["device"], r["seconds"]
        return self

    def release(self):
        if self.id is not None and not self.session.closed:
            lid, self.id = self.id, None
            try:
                self.session.call("release", lease=lid)
            except KilnError:
                pass  # it ran out already
        self.id = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return "<kiln.Lease %s on %s for %s s>" % (self.id, self.device, self.seconds)


def _try_connect(url, token, client, timeout, daemon=None, tls=None, owner_check=False):
    # A private daemon's tensors end with their session: nothing else can reach them.
    return Session(url, token=token, client=client, timeout=timeout, daemon=daemon, tls=tls,
                   tensors="session" if daemon is not None else None, owner_check=owner_check)


def search_list():
    """The URLs ``connect()`` tries, in order, when it is given none and ``$KILN_URL`` is unset:
    ``$KILN_SEARCH`` (space-separated) when set, else the user socket
    (``$XDG_RUNTIME_DIR/kiln.sock`` or ``/tmp/kiln-$UID/kiln.sock``), a system daemon's
    ``unix:/run/kiln/kiln.sock`` and ``tcp:127.0.0.1:7070``. A daemon found there is used only
    if it runs as root or this user (``_rpc.check_owner``)."""
    env = os.environ.get("KILN_SEARCH")
    if env and env.strip():
        return env.split()
    return ["unix:" + _daemon.default_socket_path(), "unix:/run/kiln/kiln.sock", "tcp:127.0.0.1:7070"]


def connect(url=None, token=None, client=None, autostart=None, timeout=10.0,
            tls_ca=None, tls_cert=None, tls_key=None, ssl_context=None, device=None, insecure_tcp=False,
            trusted_keys=None):
    """Connects to kilnd and says hello.

    ``url``: ``tcp:HOST:PORT``, ``tls:HOST:PORT`` or ``unix:PATH``. Without one: ``$KILN_URL``;
    else the first daemon that answers of ``search_list()`` (the user socket, the system
    daemon's ``/run/kiln/kiln.sock``, ``tcp:127.0.0.1:7070``) that runs as root or this
    user and admits this user (another user's is skipped, saying so, and so is one that refuses
    this user with ``E_UNAUTHENTICATED``: a wrong or missing token, or root's tokenless loopback
    daemon, which admits only root); if none does and ``autostart``
    is not False (and ``$KILN_AUTOSTART`` is not "0"), a private CPU-only kilnd is started
    (``$KILND``, a build tree around this package, or ``kilnd`` on PATH) with its own socket
    and cache in a temporary directory, shared by every later ``connect()`` of this process
    and stopped at exit; a line on stderr says so, and why no daemon was found.
    ``token``: default ``$KILN_TOKEN``.
    ``tls_ca``, ``tls_cert``, ``tls_key`` (PEM files; default ``$KILN_TLS_CA``,
    ``$KILN_TLS_CERT``, ``$KILN_TLS_KEY``), or a whole ``ssl_context``: for ``tls:`` URLs
    (docs/python.md).
    ``fleet:redis://HOST:PORT/DB`` (or ``fleet:unix:PATH``): a session on the least loaded host
    of a kiln fleet that serves ``device`` (a kind: "cuda", "hsa", "gpu", "cpu"), chosen from
    its registry on Redis (``kiln.fleet``); ``s.fleet_device`` is the device it picked. With a
    credential, only ``tls:`` and ``unix:`` hosts of the registry are used unless
    ``insecure_tcp=True`` (the registry decides where the token goes: docs/python.md);
    ``trusted_keys`` (a file, default ``$KILN_FLEET_TRUSTED_KEYS``): only hosts whose records
    are signed by a key trusted for their address (kiln.fleet).
    """
    if isinstance(url, str) and url.startswith("fleet:"):  # placed by kiln.fleet
        from . import fleet
        return fleet.connect(url, device=device, token=token, client=client, timeout=timeout, tls_ca=tls_ca,
                             tls_cert=tls_cert, tls_key=tls_key, ssl_context=ssl_context,
                             insecure_tcp=insecure_tcp, trusted_keys=trusted_keys)
    if device is not None:
        raise InvalidArgument("device= places a session on a fleet: it goes with a fleet: URL")
    tls = ssl_context or {"ca": tls_ca, "cert": tls_cert, "key": tls_key}
    if token is None:
        token = os.environ.get("KILN_TOKEN") or None
    if url is None:
        url = os.environ.get("KILN_URL") or None
    if url is not None:
        parse_url(url)
        try:
            return _try_connect(url, token, client, timeout, tls=tls)
        except KilnError:
            raise
        except OSError as e:
            raise Unavailable("cannot reach kilnd at %s: %s" % (url, _why(url, e))) from None
    reasons = []
    for cand in search_list():
        parse_url(cand)
        if cand.startswith("unix:") and not os.path.exists(cand[5:]):
            reasons.append("%s: no such socket" % cand)
            continue
        try:
            return _try_connect(cand, token, client, timeout, tls=tls, owner_check=True)
        except Unavailable as e:  # another user's daemon, or not a kilnd RPC port
            reasons.append(e.message)
        except Unauthenticated as e:  # it refused us (a token, or only its own user and root)
            reasons.append(e.message if e.message.startswith(cand) else "%s: refused: %s" % (cand, e.message))
        except OSError as e:
            reasons.append("%s: %s" % (cand, _why(cand, e)))
    why = "; ".join(reasons)
    if autostart is None:
        autostart = os.environ.get("KILN_AUTOSTART", "1") != "0"
    if not autostart:
        raise Unavailable("no kilnd found (%s); start kilnd, set KILN_URL, or allow autostart" % why)
    priv = _daemon._private
    if priv is None or not priv.alive():
        if _daemon.find_kilnd() is None:
            raise Unavailable("no kilnd found (%s) and no kilnd binary to start one; start kilnd, "
                              "set KILN_URL to a running one, or set KILND to the binary" % why)
        sys.stderr.write("kiln: no kilnd found (%s); starting a private CPU-only kilnd for this "
                         "process (KILN_AUTOSTART=0 turns this off)\n" % why)
        priv = _daemon.private_daemon()
    try:
        return _try_connect(priv.url, token, client, timeout, daemon=priv)
    except KilnError:
        raise
    except OSError as e:
        raise Unavailable("the private kilnd at %s does not answer: %s; its log ends:\n%s"
                          % (priv.url, e, priv.log()[-2000:])) from None


def _why(url, e):
    """What an OSError of connecting to url means for the user."""
    text = e.strerror or str(e)
    if isinstance(e, PermissionError) and url.startswith("unix:"):
        return text + " (the socket's group and mode decide who may connect: is your user in its group?)"
    if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        return text + " (nothing listens there)"
    return text


_default = None
_default_lock = threading.Lock()


def default_session():
    """The process's shared session (``kiln.connect()`` on first use), used where no
    device is given: ``kiln.nd.array(x)``, ``kiln.cpu(0)``."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = connect()
        return _default
