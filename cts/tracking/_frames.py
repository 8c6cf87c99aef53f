"""The trace writer's pipe protocol: length-prefixed pickled messages (:mod:`cts.tracking._writermain`)."""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

__all__ = ["read_frame", "write_frame"]

_HEADER = struct.Struct("!I")


def write_frame(stream: IO[bytes], message: Any) -> None:
    """Send one message (pickled, length-prefixed) and flush."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None
