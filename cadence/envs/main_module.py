"""Starting worker processes without running the user's script again.

With the ``"forkserver"`` and ``"spawn"`` start methods, ``multiprocessing``
prepares each child by running the parent's main script (as ``__mp_main__``)
before it unpickles the child's target, so that what the script defines can be
unpickled there. A script without an ``if __name__ == "__main__":`` guard then
runs its whole top level again in every worker: it builds its environment
again, which starts processes from a process still starting, and the worker
dies. Gymnasium's ``AsyncVectorEnv`` does not meet this only because it forks.

So a worker is started with the main script hidden from ``multiprocessing``
(`main_module_hidden`), and what the worker needs from the script (an env class
or factory the user defined there) travels by value instead (`MainFree`, with
``cloudpickle``, which Gymnasium depends on): workers never run the user's
script, guarded or not, and a class defined in a notebook works as well.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import sys
import types
from collections.abc import Iterator
from typing import Any

import cloudpickle

_HIDDEN = ("__file__", "__spec__")  # what `multiprocessing.spawn.get_preparation_data` reads


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """Hides the main module's file and spec from ``multiprocessing`` while a process starts.

    The child is then prepared without running the main script. Only these two
    attributes of ``sys.modules["__main__"]`` change, for the duration of the block:
    pickling what the script defines still works in this process.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in _HIDDEN if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        for name in _HIDDEN:
            main.__dict__.pop(name, None)
        main.__dict__.update(saved)


class MainFree:
    """``obj`` packed so that unpacking it in another process needs no ``__main__``.

    The classes and functions of ``obj`` that the main script defines travel by
    value (``cloudpickle``); `unpack` also puts them into the unpacking process's
    ``__main__`` under their names, so that objects of theirs pickle there as they do
    here (an env's saved state names its class).

    >>> MainFree([1, 2]).unpack()
    [1, 2]
    """

    def __init__(self, obj: Any):
        self._payload = cloudpickle.dumps((obj, main_objects(obj)))

    def unpack(self) -> Any:
        obj, objects = pickle.loads(self._payload)
        main = sys.modules["__main__"]
        for name, value in objects.items():
            if not hasattr(main, name):
                setattr(main, name, value)
        return obj


def main_objects(obj: Any) -> dict[str, Any]:
    """The classes and functions at the main script's top level that pickling ``obj``
    uses, by name (pickle names them ``__main__.name``)."""
    finder = _MainObjectFinder()
    finder.dump(obj)
    return {o.__qualname__: o for o in finder.found if not set(".<") & set(o.__qualname__)}


def needs_main(obj: Any) -> bool:
    """Whether pickling ``obj`` uses a class or function of the main script (a lambda too)."""
    finder = _MainObjectFinder()
    finder.dump(obj)
    return bool(finder.found)


class _MainObjectFinder(cloudpickle.CloudPickler):
    """Notes the classes and functions of ``__main__`` met while pickling (output discarded)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.found: list[Any] = []

    def persistent_id(self, obj: Any) -> None:
        if isinstance(obj, type | types.FunctionType) and obj.__module__ == "__main__":
            self.found.append(obj)
        return None
