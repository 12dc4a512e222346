"""Records what one CPython interpreter itself says of its code objects' lines and of its _Py_DebugOffsets,
for tests/unit/test_cpython.py to check gputop's decoders against interpreters this machine may not have.

Run with the interpreter to record (3.9 or newer), its JSON on standard output into py<its version>.json;
the fixtures here came from Debian roots (debootstrap, or the matrix images' files) and pyenv builds:

    chroot ROOT-of-debian-11 python3.9 - < tests/data/cpython/record.py > tests/data/cpython/py3.9.2.json
    ~/.pyenv/versions/3.10.13/bin/python3 - < tests/data/cpython/record.py > tests/data/cpython/py3.10.13.json
    (3.12.1 and 3.13.0: pyenv; 3.13.5: Debian 13; 3.14.10: Debian sid, `debootstrap --variant=minbase
    --include=python3.14 sid ROOT`)

Per code object: its line table's raw bytes, first line and code size, and the line of every 2-byte code unit
as the interpreter's own PyCode_Addr2Line gives it (what f_lineno is; -1: none), as [start, end, line] runs.
3.13+: the first DEBUG_BYTES bytes of _PyRuntime (its _Py_DebugOffsets). Uses nothing but the standard library.
"""

import ctypes
import json
import os
import sys
import types

MODULES = ("argparse", "textwrap", "json/decoder", "json/encoder", "shlex", "fractions", "string", "difflib")
#: code units recorded per version (the fixture's size)
MAX_UNITS = 12000
DEBUG_BYTES = 1024

#: what the stdlib may lack: big line gaps (3.9's multi-pair lnotab entries), lines that go back (loops,
#: multi-line calls), columns past 255 (3.11's long form), a first line past 65,535, every kind of frame
STRESS = '''
def gaps(x):
    a = x
''' + "\n" * 300 + '''    b = a + 1
''' + "\n" * 70 + '''    return (a +
            b +
        x)

def loops(n):
    total = 0
    for i in range(n):
        while total < i:
            total += 1
    return total

def columns(x):
    return ''' + " + ".join(["x"] * 120) + '''

def handlers(f):
    try:
        with open(f) as h:
            return h.read()
    except OSError as e:
        raise ValueError(e) from None
    finally:
        f = None

async def coroutine(x):
    return await x

def generator(n):
    yield from range(n)
    yield [i * i for i in range(n) if i]
    yield (lambda y: y + 1)(n)
''' + "\n" * 70000 + '''
def far(x):
    return x
'''


def code_objects(code):
    """``code`` and every code object nested in its constants."""
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out.extend(code_objects(c))
    return out


def main():
    addr2line = ctypes.pythonapi.PyCode_Addr2Line
    addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
    addr2line.restype = ctypes.c_int
    srcdir = os.path.dirname(os.__file__)
    sources = [("<stress>", STRESS)]
    for m in MODULES:
        path = os.path.join(srcdir, m + ".py")
        if not os.path.exists(path):                      # 3.14: string is a package
            path = os.path.join(srcdir, m, "__init__.py")
        with open(path, encoding="utf-8") as f:
            sources.append((m + ".py", f.read()))
    codes = []
    units = 0
    for filename, text in sources:
        for code in code_objects(compile(text, filename, "exec")):
            size = len(code.co_code)
            if units + size // 2 > MAX_UNITS and filename != "<stress>":
                continue
            units += size // 2
            runs = []
            for offset in range(0, size, 2):
                line = addr2line(code, offset)
                if runs and runs[-1][2] == line and runs[-1][1] == offset:
                    runs[-1][1] = offset + 2
                else:
                    runs.append([offset, offset + 2, line])
            table = code.co_lnotab if sys.version_info < (3, 10) else code.co_linetable
            codes.append({"file": filename, "name": getattr(code, "co_qualname", code.co_name),
                          "firstlineno": code.co_firstlineno, "code_size": size, "table": table.hex(),
                          "lines": runs})
    out = {"version": list(sys.version_info[:3]), "hexversion": sys.hexversion, "codes": codes}
    if sys.version_info >= (3, 13):
        runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
        out["debug_offsets"] = ctypes.string_at(runtime, DEBUG_BYTES).hex()
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


main()
