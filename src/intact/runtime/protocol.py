"""The messages between a warm job's client, the warm parent and the job's child (intact.runtime.warm).

Every message is a JSON object, sent as its length (4 bytes, big-endian) then its UTF-8 text, in records
of at most :data:`RECORD` bytes over a ``SOCK_SEQPACKET`` Unix socket, and read whole: the reader takes
records until it holds as many bytes as the length says, so no message is cut short, whatever its size or
the characters in it (a path in a refusal reason, a job's environment). JSON escapes every character
outside ASCII, and the lone surrogates that stand for a file name's undecodable bytes, so any ``str``
arrives as it was sent. What is not such a message - cut short, too long, not UTF-8, not JSON, not an
object - raises :class:`ProtocolError`; a client that meets one runs its job cold and says why.

The messages: client -> parent, a job's request (with its file descriptors 0-2) or a probe
(``{"probe": true, ...}``); parent -> client, ``{"pid": n}`` (the child runs the job), ``{"refused": why}``
(run it cold), ``{"ok": true}`` (a probe's: it would serve), then ``{"exit": wait status}``; client -> child,
``{"signal": n}`` (a signal to pass on).
"""

from __future__ import annotations

import json
import os
import socket
import struct

#: the largest record sent: a reader's buffer of this size never truncates one
RECORD = 1 << 16
#: the longest message accepted (a request holds the client's environment: a few KB)
MAX_MESSAGE = 1 << 24
_LENGTH = struct.Struct("!I")


class ProtocolError(Exception):
    """What arrived is not a whole message of this protocol (the text says what is wrong with it)."""


def address(path: str) -> str:
    """The address to bind or connect to for a socket named ``path`` (``@name``: Linux's abstract namespace)."""
    return "\0" + path[1:] if path.startswith("@") else path


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def connect(path: str, timeout: float | None = None) -> socket.socket:
    """A connection to the warm parent at ``path``, checked to be this user's (an abstract name has no file
    permissions: the check is on who answers); OSError where there is none."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.settimeout(timeout)
        sock.connect(address(path))
        if peer_uid(sock) != os.getuid():
            raise OSError("another user's socket")
    except BaseException:
        sock.close()
        raise
    return sock


def encode(message: dict) -> list[bytes]:
    """The records that carry ``message``: its length, then its JSON text (ASCII), cut every :data:`RECORD` bytes."""
    data = json.dumps(message).encode("ascii")
    blob = _LENGTH.pack(len(data)) + data
    return [blob[i:i + RECORD] for i in range(0, len(blob), RECORD)]


def send(sock: socket.socket, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
    """Send ``message`` (and the file descriptors ``fds``, with its first record). A message of one record is
    one system call: a signal handler may send one while another is being sent."""
    first, *rest = encode(message)
    if fds:
        socket.send_fds(sock, [first], list(fds))
    else:
        sock.send(first)
    for record in rest:
        sock.send(record)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """The next message, whole, and the file descriptors that came with it (at most ``max_fds``: the caller
    owns them, also when ProtocolError is raised); ``(None, [])`` where the other end closed the connection
    between messages. OSError from the socket passes through (a timeout, a reset)."""
    first, fds, _, _ = socket.recv_fds(sock, RECORD, max_fds) if max_fds else (sock.recv(RECORD), [], 0, None)
    if not first:
        return None, fds
    if len(first) < _LENGTH.size:
        raise ProtocolError(f"a record of {len(first)} bytes, shorter than a message's length")
    (length,), data = _LENGTH.unpack_from(first), bytearray(first[_LENGTH.size:])
    if length > MAX_MESSAGE:
        raise ProtocolError(f"a message of {length} bytes, longer than {MAX_MESSAGE}")
    while len(data) < length:
        record = sock.recv(RECORD)
        if not record:
            raise ProtocolError(f"the connection closed after {len(data)} of a message's {length} bytes")
        data += record
    if len(data) != length:
        raise ProtocolError(f"{len(data)} bytes where the message's length says {length}")
    return decode(bytes(data)), fds


def decode(data: bytes) -> dict:
    """The message whose JSON text is ``data``."""
    try:
        message = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ProtocolError(f"not a JSON message: {err}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"a JSON {type(message).__name__}, not an object")
    return message
