// Driver handles whose look-up gputop did not see (tests/bpf/test_driver_handles.py).
//
// Built with -DFAKE_LIBCUDA -DLAYOUT=N as a library named libcuda.so.1: its own cuModuleGetFunction
// returns a handle to a structure of 1,024 bytes (a real one is larger than the 512 searched) that holds a pointer to its own copy of the name (as
// the driver's CUfunc_st does: cuFuncGetName reads it), laid out as LAYOUT says, among pointers to
// other strings (decoys), to the structure itself and small numbers; cuLaunchKernel does nothing.
//   1  the name's pointer at +0x18 (a decoy's at +0x08, the structure's own address at +0x28)
//   2  through one more pointer: the structure at +0x40 points to one that holds the name's at +0x10
//   3  disagreeing: the name's at +0x18 and a decoy's at +0x20 in every other handle, the other way round
//      in the rest
//   4  ambiguous: the name's at +0x10 and at +0x18 in handles looked up after gputop started; looked up
//      before, +0x18 holds another name's
//   5  hostile: the name's at +0x18 in handles looked up after gputop started; looked up before, +0x18
//      points to a page unmapped since, to 1 MiB of 'a' without a NUL, to bytes that are no name
// The module argument says when (1: before gputop started, 2: after).
//
// Built without: the program. driver_handles LIBCUDA GO AFTER [peer] looks up three kernels (before_*;
// with "peer": peer_*, another process's kernels of other names),
// prints "handle NAME 0xHANDLE" for each and "looked", waits for the file GO, looks up AFTER more
// (after_*: 0 to 2), launches the i-th handle (10 * (i + 1) + 1) times (11, 21, 31: before; 41, 51:
// after), prints "launched" and sleeps until killed.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;

#ifdef FAKE_LIBCUDA

static void put(void *at, size_t off, const void *ptr) {
    memcpy((char *)at + off, &ptr, sizeof(ptr));
}

static int looked;

CUresult cuModuleGetFunction(void **out, void *module, const char *name) {
    unsigned char *f = calloc(1, 1024);
    int when = (int)(intptr_t)module;
    if (!f || !out || !name)
        return 1;
    for (int i = 0; i < 1024; i += 8)
        f[i] = (unsigned char)(i / 8);     // small numbers: no pointers
    put(f, 0x08, strdup("decoy_module_name"));
    put(f, 0x28, f);
    switch (LAYOUT) {
    case 1:
        put(f, 0x18, strdup(name));
        break;
    case 2: {
        unsigned char *info = calloc(1, 64);
        put(info, 0x08, strdup("decoy_info_name"));
        put(info, 0x10, strdup(name));
        put(f, 0x40, info);
        break;
    }
    case 3:
        put(f, looked % 2 ? 0x20 : 0x18, strdup(name));
        put(f, looked % 2 ? 0x18 : 0x20, strdup("another_kernel"));
        break;
    case 4:
        put(f, 0x10, strdup(name));
        put(f, 0x18, when == 1 ? strdup("another_kernel") : strdup(name));
        break;
    case 5:
        if (when == 2) {
            put(f, 0x18, strdup(name));
        } else if (looked == 0) {
            void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (gone == MAP_FAILED || munmap(gone, 4096) != 0)
                return 1;
            put(f, 0x18, gone);
        } else if (looked == 1) {
            char *endless = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (endless == MAP_FAILED)
                return 1;
            memset(endless, 'a', 1 << 20);
            put(f, 0x18, endless);
        } else {
            put(f, 0x18, strdup("two words\x1b[31m"));
        }
        break;
    }
    looked++;
    *out = f;
    return 0;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *stream, void **params, void **extra) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)stream;
    (void)params, (void)extra;
    return 0;
}

#else

#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

typedef CUresult (*getfn_t)(void **, void *, const char *);
typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                             void **, void **);

static const char *NAMES[] = {"_Z12before_firstPfi", "before_second", "_ZN6gputop4test12before_thirdEv",
                              "after_one", "_Z9after_twoPKf"};
static const char *PEER_NAMES[] = {"_Z10peer_alphai", "peer_beta", "_ZN6gputop4test10peer_gammaEv", "peer_delta",
                                   "peer_epsilon"};

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "peer") == 0))
        return 2;
    const char **names = argc == 5 ? PEER_NAMES : NAMES;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    getfn_t getfn = (getfn_t)dlsym(lib, "cuModuleGetFunction");
    launch_t launch = (launch_t)dlsym(lib, "cuLaunchKernel");
    int after = atoi(argv[3]);
    void *handles[5];
    printf("ready %d\n", getpid());
    for (int i = 0; i < 3 + after; i++) {
        if (i == 3) {
            printf("looked\n");
            fflush(stdout);
            while (access(argv[2], F_OK) != 0)
                usleep(20000);
        }
        if (getfn(&handles[i], (void *)(intptr_t)(i < 3 ? 1 : 2), names[i]) != 0)
            return 1;
        printf("handle %s %p\n", names[i], handles[i]);
    }
    if (after == 0) {
        printf("looked\n");
        fflush(stdout);
        while (access(argv[2], F_OK) != 0)
            usleep(20000);
    }
    for (int i = 0; i < 3 + after; i++)
        for (int n = 0; n < 10 * (i + 1) + 1; n++)
            launch(handles[i], 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
    printf("launched\n");
    fflush(stdout);
    for (;;)
        pause();
}

#endif
