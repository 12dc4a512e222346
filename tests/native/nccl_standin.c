// A stand-in libnccl.so.2 for what the real one cannot do without a GPU: create a communicator.
// ncclCommInitRank, ncclCommInitRankConfig and ncclCommInitRankScalable succeed (a heap handle as the
// communicator), each collective succeeds doing nothing. The real library's collectives, groups and failed
// initialisations are tested against it (tests/bpf/test_nccl.py); this one only for the communicators made.
#include <stdlib.h>

typedef struct { char internal[128]; } ncclUniqueId;

int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
    (void)nranks; (void)id; (void)rank;
    *comm = malloc(64);
    return 0;
}
int ncclCommInitRankConfig(void **comm, int nranks, ncclUniqueId id, int rank, void *config) {
    (void)config;
    return ncclCommInitRank(comm, nranks, id, rank);
}
int ncclCommInitRankScalable(void **comm, int nranks, int rank, int nid, ncclUniqueId *ids, void *config) {
    (void)nid; (void)ids; (void)config;
    *comm = malloc(64);
    (void)nranks; (void)rank;
    return 0;
}
int ncclAllReduce(const void *s, void *r, size_t count, int dtype, int op, void *comm, void *stream) {
    (void)s; (void)r; (void)count; (void)dtype; (void)op; (void)comm; (void)stream;
    return 0;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
