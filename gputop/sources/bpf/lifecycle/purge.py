"""Deleting the entries of processes that are gone from the BPF tables keyed by process: one walk per
table, in batches of keys where the kernel and libbcc have batch operations, else key by key."""

from __future__ import annotations

import ctypes
import errno
import sys
from collections import Counter
from functools import cache
from typing import Any

from gputop.sources.bpf.lifecycle.procid import Doomed, ident, key_ident
from gputop.sources.bpf.program.program import load_bcc

#: entries a BPF_MAP_LOOKUP_BATCH call asks for
_BATCH = 1024


@cache
def _batch_buffers(key_size: int, value_size: int) -> tuple[ctypes.Array[ctypes.c_char], ctypes.Array[ctypes.c_char]]:
    """Key and value buffers for batch walks, made once per size (forgetting walks a dozen tables
    several times a refresh; a new zeroed buffer each time cost more than the walk)."""
    return (ctypes.c_char * (key_size * _BATCH))(), (ctypes.c_char * (value_size * _BATCH))()


def batch_ops(lib: Any) -> bool:
    """Whether this libbcc exports the batch map operations (``bpf_lookup_batch``, ``bpf_delete_batch``:
    bcc 0.20+; the 0.18 of Debian 11 and Ubuntu 22.04 has neither). Without them the tables are walked
    key by key: the same entries deleted, slower for a process that left many."""
    return all(hasattr(lib, name) for name in ("bpf_lookup_batch", "bpf_delete_batch"))


_GONE = object()


def delete_by_pid(table: Any, doomed: Doomed) -> Counter[int]:
    """Delete the entries of the processes ``doomed`` names from a (process, address)-keyed table: one
    walk, in batches of keys where the kernel has batch operations (a process that imported torch
    leaves ~100,000 registrations: key by key, their walk took seconds). The entries deleted, by
    process identity (given back to their tenants: shares.py)."""
    deleted = _delete_by_pid_batched(table, doomed)
    if deleted is None:
        deleted = Counter()
        for k in [k for k in table if doomed.hit(key_ident(k))]:
            if table.pop(k, _GONE) is not _GONE:
                deleted[key_ident(k)] += 1
    return deleted


def _delete_by_pid_batched(table: Any, doomed: Doomed) -> Counter[int] | None:
    """The same walk through BPF_MAP_LOOKUP_BATCH and BPF_MAP_DELETE_BATCH; None when the
    kernel, map or libbcc (``batch_ops``) cannot (then nothing was deleted). A key's first 8 bytes
    are its identity."""
    lib = load_bcc().lib
    if not batch_ops(lib):
        return None
    size, at = ctypes.sizeof(table.Key), table.Key.tgid.offset
    chunk = _BATCH
    keys, values = _batch_buffers(size, ctypes.sizeof(table.Leaf))
    token, first, doomed_keys = ctypes.c_uint32(0), True, []
    while True:
        count = ctypes.c_uint32(chunk)
        rc = lib.bpf_lookup_batch(table.map_fd, None if first else ctypes.byref(token), ctypes.byref(token),
                                  keys, values, ctypes.byref(count))
        err = ctypes.get_errno()
        if rc != 0 and err != errno.ENOENT:
            if first:
                return None
            break                                   # cut short: what was found still goes
        raw = ctypes.string_at(keys, count.value * size)
        doomed_keys += [raw[i:i + size] for i in range(0, len(raw), size)
                        if doomed.hit(int.from_bytes(raw[i + at:i + at + 8], sys.byteorder))]
        first = False
        if rc != 0:                                 # ENOENT: the walk is over
            break
    deleted: Counter[int] = Counter()
    for i in range(0, len(doomed_keys), chunk):
        keys_i = doomed_keys[i:i + chunk]
        part = b"".join(keys_i)
        n = ctypes.c_uint32(len(keys_i))
        lib.bpf_delete_batch(table.map_fd, ctypes.create_string_buffer(part, len(part)), ctypes.byref(n))
        # the kernel stops at a key that is gone (deleted meanwhile): n says how many went before it
        for raw in keys_i[:n.value]:
            deleted[int.from_bytes(raw[at:at + 8], sys.byteorder)] += 1
    return deleted


def delete_ranges(table: Any, doomed: Doomed) -> Counter[int]:
    """The same for an LPM trie whose keys start with the tgid and generation (big-endian)."""
    wide = len(table.Key().data) == 16      # tgid, gen, address (a program without generations: no gen)
    deleted: Counter[int] = Counter()
    for k in [k for k in table]:               # (not list(): an LPM trie has no len)
        me = ident(int.from_bytes(bytes(k.data[:4]), "big"), int.from_bytes(bytes(k.data[4:8]), "big") if wide else 0)
        if doomed.hit(me) and table.pop(k, _GONE) is not _GONE:
            deleted[me] += 1
    return deleted
