"""Exceptions: one class per error code of docs/protocol.md §2, all deriving from KilnError.

Each carries the server's ``message`` and its numeric ``code`` (and ``name``, e.g.
``"E_COMPILE"``). Some also derive from the matching Python built-in, so that ordinary
``except ValueError`` / ``except TimeoutError`` code keeps working.
"""

import concurrent.futures as _cf

__all__ = [
    "KilnError", "InvalidArgument", "NoMethod", "Unauthenticated", "PermissionDenied",
    "NotFound", "ResourceExhausted", "CompileError", "CompilerCrashed", "DeviceError",
    "DeviceFault", "Timeout", "Cancelled", "Unavailable", "InternalError",
    "error_from_wire", "ERROR_CLASSES",
]


class KilnError(Exception):
    """Base class of every error kiln raises. ``code`` is the protocol error code (0 when
    the code is not one this client knows), ``name`` its symbolic name, ``message`` the
    server's sentence."""

    code = 0
    name = "E_UNKNOWN"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s: %s" % (self.name, self.message)

    def __reduce__(self):
        return (self.__class__, (self.message, self.code))


class InvalidArgument(KilnError, ValueError):
    """Malformed message, unknown/missing/mistyped field, bad value."""
    code, name = 1, "E_INVALID_ARGUMENT"


class NoMethod(KilnError):
    """The server has no such method."""
    code, name = 2, "E_NO_METHOD"


class Unauthenticated(KilnError):
    """A token is required, or the token is wrong."""
    code, name = 3, "E_UNAUTHENTICATED"


class PermissionDenied(KilnError, PermissionError):
    """The tenant may not use this device or method."""
    code, name = 4, "E_PERMISSION"


class NotFound(KilnError, LookupError):
    """No such tensor, module, kernel or device (for this tenant)."""
    code, name = 5, "E_NOT_FOUND"


class ResourceExhausted(KilnError):
    """A limit or quota was hit, or memory ran out."""
    code, name = 6, "E_RESOURCE_EXHAUSTED"


class CompileError(KilnError):
    """The payload did not compile; the diagnostics are in the message."""
    code, name = 7, "E_COMPILE"


class CompilerCrashed(KilnError):
    """The compile worker died on this job."""
    code, name = 8, "E_COMPILER_CRASHED"


class DeviceError(KilnError):
    """The device rejected the operation."""
    code, name = 9, "E_DEVICE"


class DeviceFault(KilnError):
    """The device worker died or the kernel faulted; the tensors it held are lost."""
    code, name = 10, "E_DEVICE_FAULT"


class Timeout(KilnError, TimeoutError):
    """A deadline passed (on the server, or a client-side wait with a timeout)."""
    code, name = 11, "E_TIMEOUT"


class Cancelled(KilnError, _cf.CancelledError):
    """Cancelled by the client or by the server's shutdown (also a
    ``concurrent.futures.CancelledError``)."""
    code, name = 12, "E_CANCELLED"


class Unavailable(KilnError, ConnectionError):
    """The service or device is not available now (draining, leased, absent), or the
    connection to the daemon is gone."""
    code, name = 13, "E_UNAVAILABLE"


class InternalError(KilnError):
    """A bug in kiln; please report it."""
    code, name = 14, "E_INTERNAL"


ERROR_CLASSES = {cls.code: cls for cls in (
    InvalidArgument, NoMethod, Unauthenticated, PermissionDenied, NotFound,
    ResourceExhausted, CompileError, CompilerCrashed, DeviceError, DeviceFault,
    Timeout, Cancelled, Unavailable, InternalError)}


def error_from_wire(err):
    """Turns the ``error`` element of a response (``[code, message]``) or of an ``error``
    notification (``{"code": .., "message": ..}``) into an exception instance."""
    code, message = None, None
    if isinstance(err, (list, tuple)) and len(err) >= 1:
        code = err[0]
        message = err[1] if len(err) > 1 else None
    elif isinstance(err, dict):
        code, message = err.get("code"), err.get("message")
    else:
        message = "malformed error from the server: %r" % (err,)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    if message is None:
        message = "(the server gave no message)"
    elif not isinstance(message, str):
        message = str(message)
    cls = ERROR_CLASSES.get(code) if isinstance(code, int) else None
    if cls is None:
        exc = KilnError(message, code if isinstance(code, int) else 0)
        return exc
    return cls(message)
