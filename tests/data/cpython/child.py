"""A Python process for tests/unit/test_cpython.py to walk from outside (any CPython 3.9+): its main thread
sleeps under a known stack, entered through C (map, next) and through a generator, in functions whose names
and file name take each width of str (1, 2 and 4 bytes a character); a second thread waits. It prints one
JSON line of what the interpreter itself says (code object ids, names, lines; thread ids; _PyRuntime's
address), then sleeps until killed. Run as ``python -c "$(cat child.py)"``.
"""

import ctypes
import dis
import json
import sys
import threading
import time

FILENAME = "/nonexistent/файл_child.py"      # 2 bytes a character
BODY = '''
def report(top, line):
    frames = []
    f = top
    while f is not None:
        code = f.f_code
        caller = f is not top                          # stopped in a call: its place stays put
        frames.append({"code": id(code), "name": getattr(code, "co_qualname", code.co_name),
                       "file": code.co_filename, "line": f.f_lineno if caller else line,
                       "lasti": f.f_lasti if caller else None,
                       "op": dis.opname[code.co_code[f.f_lasti]] if caller else None})
        f = f.f_back
    fs = ctypes.c_ulong()
    ctypes.CDLL(None).syscall(158, 0x1003, ctypes.byref(fs))          # arch_prctl(ARCH_GET_FS)
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    print(json.dumps({"version": list(sys.version_info[:2]), "native_tid": threading.get_native_id(),
                      "ident": threading.get_ident(), "fsbase": fs.value, "runtime": runtime, "frames": frames,
                      "worker": WORKER}), flush=True)


def sleeper():
    here = sys._getframe()
    report(here, here.f_lineno + 1)
    time.sleep(3600)


def 𠀀𠀁():
    return sleeper()


def naïve():
    return 𠀀𠀁()


def gen():
    yield naïve()


def middle(x):
    return next(gen())


class Stack:
    def outer(self):
        return list(map(middle, [1]))


def worker(ready, never):
    WORKER.update(native_tid=threading.get_native_id(), ident=threading.get_ident(), code=id(worker.__code__))
    ready.set()
    never.wait()


WORKER = {}
ready = threading.Event()
threading.Thread(target=worker, args=(ready, threading.Event()), daemon=True).start()
ready.wait()
Stack().outer()
'''

exec(compile(BODY, FILENAME, "exec"), {"ctypes": ctypes, "dis": dis, "json": json, "sys": sys, "threading": threading,
                                       "time": time, "__name__": "child"})
