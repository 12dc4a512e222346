/* The offsets of gputop/sources/bpf/pystacks/cpython.py's Layout, as one CPython version's own headers lay
 * its structs out (x86-64 Linux, release build with the GIL): compiled against each version's headers, its
 * output is that version's entry of offsetof.json (tests/unit/test_cpython.py holds LAYOUTS and the parsed
 * _Py_DebugOffsets to it). The headers of an installed interpreter do (pyenv's, Debian's python3.X-dev:
 * both ship include/python3.X/internal), e.g.
 *
 *   I=$(python3.12 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
 *   gcc -w -I$I -I$I/internal offsets.c -o /tmp/offsets && /tmp/offsets
 *
 * (Debian's pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>: add -I for the directory above it.)
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#endif
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_stackref.h"
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif

#define P(name, expr) printf("%s\"%s\": %ld", first ? "" : ", ", name, (long)(expr)), first = 0

static unsigned state_bits(PyASCIIObject *a) { unsigned w; memcpy(&w, &a->state, 4); return w; }

int main(void) {
    int first = 1;
    PyASCIIObject a;
    printf("{");
    P("hexversion", PY_VERSION_HEX);
    P("interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX < 0x030B0000
    P("threads_head", offsetof(PyInterpreterState, tstate_head));
    P("ts_native_tid", -1);
#else
    P("threads_head", offsetof(PyInterpreterState, threads.head));
    P("ts_native_tid", offsetof(PyThreadState, native_thread_id));
#endif
    P("ts_next", offsetof(PyThreadState, next));
    P("ts_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030B0000
    P("ts_frame", offsetof(PyThreadState, frame));
    P("cframe_current", -1);
    P("fr_previous", offsetof(PyFrameObject, f_back));
    P("fr_code", offsetof(PyFrameObject, f_code));
    P("fr_instr", offsetof(PyFrameObject, f_lasti));
    P("fr_instr_size", sizeof(((PyFrameObject *)0)->f_lasti));
    P("fr_owner", -1);
    P("owner_shim", -1);
#if PY_VERSION_HEX < 0x030A0000
    P("co_linetable", offsetof(PyCodeObject, co_lnotab));
#else
    P("co_linetable", offsetof(PyCodeObject, co_linetable));
#endif
    P("co_code", offsetof(PyCodeObject, co_code));
    P("co_qualname", -1);
#else
#if PY_VERSION_HEX < 0x030D0000
    P("ts_frame", offsetof(PyThreadState, cframe));
    P("cframe_current", offsetof(_PyCFrame, current_frame));
    P("fr_code", offsetof(_PyInterpreterFrame, f_code));
    P("fr_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
    P("ts_frame", offsetof(PyThreadState, current_frame));
    P("cframe_current", -1);
    P("fr_code", offsetof(_PyInterpreterFrame, f_executable));
    P("fr_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
    P("fr_instr_size", 8);
    P("fr_previous", offsetof(_PyInterpreterFrame, previous));
    P("fr_owner", offsetof(_PyInterpreterFrame, owner));
    /* the owner of the frame the eval loop pushes where C calls into it (Python/ceval.c's entry frame) */
#if PY_VERSION_HEX >= 0x030E0000
    P("owner_shim", FRAME_OWNED_BY_INTERPRETER);
#elif PY_VERSION_HEX >= 0x030C0000
    P("owner_shim", FRAME_OWNED_BY_CSTACK);
#else
    P("owner_shim", -1);
#endif
    P("co_linetable", offsetof(PyCodeObject, co_linetable));
    P("co_code", offsetof(PyCodeObject, co_code_adaptive));
    P("co_qualname", offsetof(PyCodeObject, co_qualname));
#endif
#if PY_VERSION_HEX >= 0x030E0000
    P("code_tag_mask", Py_TAG_BITS);
#else
    P("code_tag_mask", 0);
#endif
    P("co_filename", offsetof(PyCodeObject, co_filename));
    P("co_name", offsetof(PyCodeObject, co_name));
    P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("ascii_size", sizeof(PyASCIIObject));
    P("compact_size", sizeof(PyCompactUnicodeObject));
    P("str_length", offsetof(PyASCIIObject, length));
    P("str_state", offsetof(PyASCIIObject, state));
    memset(&a, 0, sizeof a); a.state.kind = 7; P("state_kind", state_bits(&a));
    memset(&a, 0, sizeof a); a.state.compact = 1; P("state_compact", state_bits(&a));
    memset(&a, 0, sizeof a); a.state.ascii = 1; P("state_ascii", state_bits(&a));
    P("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
    P("bytes_sval", offsetof(PyBytesObject, ob_sval));
    P("ob_type", offsetof(PyObject, ob_type));
    P("tp_name", offsetof(PyTypeObject, tp_name));
    printf("}\n");
    return 0;
}
