// A kernel name as a constant of a library's read-only data, 256 KiB into it: on a page that a process
// which dlopens the library and passes the name's address (cuda_workload's register_in) never touches,
// so the page is not present in it when gputop's BPF side first reads the name (tests/bpf/test_faults.py).
// UNTOUCHED_AT in cuda_workload.c is the offset.
#define UNTOUCHED_AT (256 * 1024)

const struct {
    char pad[UNTOUCHED_AT];
    char name[64];
} gputop_untouched = {{1}, "_ZN6gputop4test14untouched_nameEPf"};
