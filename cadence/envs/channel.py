"""`Channel`: the pipe between `ParallelEnvironment` and one of its worker processes.

It carries two kinds of traffic. One-byte signals: before a worker is attached to
shared memory, `STEP` asks it to step and `OK` answers; once attached, steps go
through the `cadence.envs.doorbell` control block and the same bytes only wake a
side that sleeps on its pipe. And messages (specs, errors, states, frames,
commands with arguments): a `MESSAGE` byte followed by a pickle in
``multiprocessing``'s framing. A ``multiprocessing.connection.Connection`` round
trip costs several system calls and ~20 us of Python per message, which on a
2-core machine was most of a CartPole step.
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection
from typing import Any

STEP = b"s"  # parent -> worker: step every env with the actions in shared memory
OK = b"k"  # worker -> parent: done, nothing to report
MESSAGE = b"m"  # either way: a pickled object follows


class Channel:
    """One end of a parent <-> worker pipe (a ``multiprocessing`` ``Connection``).

    The ``Connection`` keeps no read buffer of its own, so single bytes read and
    written on its file descriptor interleave safely with its framed messages.

    Args:
        conn: this end of the pipe.
    """

    def __init__(self, conn: Connection):
        self.conn = conn
        self.fd = conn.fileno()

    def send_op(self, op: bytes) -> None:
        """Sends a one-byte signal (`STEP` or `OK`)."""
        os.write(self.fd, op)

    def send(self, obj: Any) -> None:
        """Sends a picklable object."""
        payload = pickle.dumps(obj)
        os.write(self.fd, MESSAGE)
        self.conn.send_bytes(payload)

    def receive(self) -> tuple[bytes, Any]:
        """Blocks for the next signal or object: ``(op, obj)``, ``obj`` ``None`` for a signal.

        Raises:
            EOFError: the other end is closed (its process exited or died).
        """
        op = os.read(self.fd, 1)
        if not op:
            raise EOFError("the other end of the env worker pipe is closed")
        if op == MESSAGE:
            return op, pickle.loads(self.conn.recv_bytes())
        return op, None

    def receive_message(self) -> Any:
        """Blocks for the next object, dropping the one-byte signals before it.

        Raises:
            EOFError: the other end is closed.
        """
        while True:
            op, obj = self.receive()
            if op == MESSAGE:
                return obj

    def drain_signal(self) -> bool:
        """Reads one byte that is known to be waiting; ``False`` if it was the end of the pipe.

        The pipe is a socket pair: a worker that dies with a wake-up byte unread in its
        end resets the connection, which reads as an error here rather than as the end.
        """
        try:
            return bool(os.read(self.fd, 1))
        except ConnectionResetError:
            return False

    def poll(self) -> bool:
        """Whether something (or the end of the pipe) can be read without blocking."""
        return self.conn.poll()

    def close(self) -> None:
        self.conn.close()
