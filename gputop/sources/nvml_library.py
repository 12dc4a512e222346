"""Which libnvidia-ml.so.1 pynvml uses, process-wide.

pynvml opens ``libnvidia-ml.so.1`` by name through ``ctypes`` the first time ``nvmlInit`` runs, and
keeps it in the module global ``pynvml.nvmlLib``. To use a given file instead, ``acquire`` loads it
with ``ctypes.CDLL(path)``, stores it in ``pynvml.nvmlLib`` and empties pynvml's function-pointer
cache. That global is per process: sources with different libraries can follow one another (each
``release``s it) but not overlap; a second one is told why not instead of swapping the library under
the first one. The caller passes the ``pynvml`` module (only ``sources/nvml.py`` imports it).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

_lib_lock = threading.Lock()
_lib_key: str | None = None  # the path installed into pynvml.nvmlLib by a source; None = pynvml's own
_lib_users = 0


def acquire(nv: Any, path: str | None) -> str | None:
    """Make pynvml use ``path`` (or its default when None). Returns why not, or None on success."""
    global _lib_key, _lib_users
    key = os.path.realpath(path) if path else None
    with _lib_lock:
        if _lib_users and key != _lib_key:
            current = _lib_key or "libnvidia-ml.so.1"
            return f"another NVML library ({current}) is in use in this process"
        if not _lib_users and (key != _lib_key or (key is not None and nv.nvmlLib is None)):
            with nv.libLoadLock:
                if key is None:
                    nv.nvmlLib = None  # pynvml loads libnvidia-ml.so.1 by name at nvmlInit
                else:
                    try:
                        lib = ctypes.CDLL(key)
                    except OSError as exc:
                        return f"cannot load {path}: {exc}"
                    nv.nvmlLib = lib
                nv._nvmlGetFunctionPointer_cache.clear()
            _lib_key = key
        _lib_users += 1
    return None


def release() -> None:
    global _lib_users
    with _lib_lock:
        _lib_users = max(0, _lib_users - 1)
