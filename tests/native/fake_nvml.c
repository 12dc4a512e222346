/*
 * fake_nvml.c — a stand-in libnvidia-ml.so.1 that the real pynvml (nvidia-ml-py 13.615.71) loads.
 *
 * Build: gcc -O1 -g -Wall -shared -fPIC -o <dir>/libnvidia-ml.so.1 fake_nvml.c
 *
 * It serves scripted GPUs and processes from the text file named by $FAKE_NVML_SCRIPT. The file is
 * re-read whenever it changes (inode, size or mtime; write a temp file and rename it over the old one),
 * checked at the start of every call, so a test can change the GPUs mid-run (make one lost, add XID
 * events...). State that a real driver keeps between calls (event registrations, XID events already
 * delivered, the last timestamp passed to nvmlDeviceGetProcessUtilization) survives reloads.
 *
 * Script, one directive a line, '#' starts a comment, numbers in decimal:
 *
 *   init <ERR>                       nvmlInit* fails with this error (e.g. DRIVER_NOT_LOADED)
 *   driver <version>                 nvmlSystemGetDriverVersion
 *   count <n>                        device count (default: highest scripted gpu index + 1)
 *   events_create <ERR>              nvmlEventSetCreate fails
 *   gpu <i> name <rest of line>
 *   gpu <i> uuid <uuid>
 *   gpu <i> util <gpu%> <mem%>
 *   gpu <i> memory <total> <used> [reserved]     bytes; free = total - used - reserved
 *   gpu <i> temp <C>
 *   gpu <i> power <mW>
 *   gpu <i> power_limit <mW>                     enforced limit
 *   gpu <i> power_mgmt_limit <mW>
 *   gpu <i> sm_clock <MHz>
 *   gpu <i> pcie <tx KB/s> <rx KB/s>
 *   gpu <i> ecc <corrected> <uncorrected>        volatile counts (aggregate = volatile + 1000)
 *   gpu <i> xid <total> [code]                   XID critical errors that occurred so far; events raised
 *                                                before a set registered the GPU are not delivered
 *   gpu <i> mig_mode <0|1>
 *   gpu <i> lost                                 every call on this GPU returns GPU_IS_LOST
 *   gpu <i> fail <field> <ERR>                   fields: handle name uuid util memory temp power
 *                                                power_limit power_mgmt_limit clock pcie ecc procs
 *                                                mps_procs proc_util mig events, and memory_v2
 *                                                (only nvmlDeviceGetMemoryInfo_v2 fails)
 *   mig <gpu> <slot> <gi> <ci> <total> <used> <uuid> <rest of line: name>
 *   proc <gpu> <pid> <used bytes | na> [gi=<n>] [ci=<n>] [mps]
 *   putil <gpu> <pid> <sm%> <mem%> [<timestamp us>]  (default timestamp: now, so every read sees it)
 *
 * ERR is an NVML_ERROR_* suffix (NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST, UNKNOWN, ...) or a number.
 *
 * Test hooks (not NVML): fake_nvml_calls() counts every NVML entry point called;
 * fake_nvml_last_seen(gpu) is the lastSeenTimeStamp of the last nvmlDeviceGetProcessUtilization call;
 * fake_nvml_registered(gpu) the event mask registered for that GPU.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define MAX_GPUS 64
#define MAX_MIG 7
#define MAX_PROCS 4096
#define MAX_PUTIL 4096
#define NO_ID 0xFFFFFFFFu
#define XID_EVENT 0x8ULL
#define MEMORY_V2 ((2u << 24) | 40u)

enum field {
    F_HANDLE, F_NAME, F_UUID, F_UTIL, F_MEMORY, F_TEMP, F_POWER, F_POWER_LIMIT, F_POWER_MGMT_LIMIT,
    F_CLOCK, F_PCIE, F_ECC, F_PROCS, F_MPS_PROCS, F_PROC_UTIL, F_MIG, F_EVENTS, F_MEMORY_V2, F_NFIELDS
};
static const char *field_names[F_NFIELDS] = {
    "handle", "name", "uuid", "util", "memory", "temp", "power", "power_limit", "power_mgmt_limit",
    "clock", "pcie", "ecc", "procs", "mps_procs", "proc_util", "mig", "events", "memory_v2",
};

static const struct { const char *name; int code; } errors[] = {
    {"SUCCESS", 0}, {"UNINITIALIZED", 1}, {"INVALID_ARGUMENT", 2}, {"NOT_SUPPORTED", 3},
    {"NO_PERMISSION", 4}, {"ALREADY_INITIALIZED", 5}, {"NOT_FOUND", 6}, {"INSUFFICIENT_SIZE", 7},
    {"INSUFFICIENT_POWER", 8}, {"DRIVER_NOT_LOADED", 9}, {"TIMEOUT", 10}, {"IRQ_ISSUE", 11},
    {"LIBRARY_NOT_FOUND", 12}, {"FUNCTION_NOT_FOUND", 13}, {"CORRUPTED_INFOROM", 14},
    {"GPU_IS_LOST", 15}, {"RESET_REQUIRED", 16}, {"OPERATING_SYSTEM", 17},
    {"LIB_RM_VERSION_MISMATCH", 18}, {"IN_USE", 19}, {"MEMORY", 20}, {"NO_DATA", 21},
    {"ARGUMENT_VERSION_MISMATCH", 25}, {"UNKNOWN", 999},
};

/* what the real libnvidia-ml returns from nvmlErrorString */
static const char *error_string(int code) {
    switch (code) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

struct mig {
    int present;
    unsigned gi, ci;
    unsigned long long total, used;
    char uuid[96], name[96];
};

struct gpu {
    int present, lost, mig_mode;
    char name[96], uuid[96];
    unsigned util_gpu, util_mem, temp, power_mw, power_limit_mw, power_mgmt_limit_mw, sm_clock;
    unsigned pcie_tx, pcie_rx, xid_total, xid_code;
    unsigned long long mem_total, mem_used, mem_reserved, ecc_corrected, ecc_uncorrected;
    int fail[F_NFIELDS];
    struct mig mig[MAX_MIG];
};

struct proc { int gpu; unsigned pid, gi, ci; unsigned long long used; int mps; };
struct putil { int gpu; unsigned pid, sm, mem; unsigned long long ts; };

/* scripted state: reset on every reload */
static struct {
    int init_error, events_create_error, count;
    char driver[80];
    struct gpu gpus[MAX_GPUS];
    struct proc procs[MAX_PROCS];
    int nprocs;
    struct putil putils[MAX_PUTIL];
    int nputils;
} S;

/* driver-side state: survives reloads */
struct dev { int gpu, mig; }; /* mig = -1 for the GPU itself */
static struct dev gpu_devs[MAX_GPUS];
static struct dev mig_devs[MAX_GPUS][MAX_MIG];
static struct { unsigned long long registered; unsigned xid_delivered; unsigned long long last_seen; } G[MAX_GPUS];
static struct { int dummy; } event_set;
static int initialised;
static unsigned long long ncalls;
static struct { dev_t dev; ino_t ino; off_t size; struct timespec mtime; int loaded; } stamp;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int parse_error(const char *s) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (strcmp(s, errors[i].name) == 0) return errors[i].code;
    return atoi(s) ? atoi(s) : NVML_ERROR_UNKNOWN;
}

static int field_index(const char *s) {
    for (int i = 0; i < F_NFIELDS; i++)
        if (strcmp(s, field_names[i]) == 0) return i;
    return -1;
}

static void rest_of_line(char *dst, size_t n, const char *line, int offset) {
    const char *p = line + offset;
    while (*p == ' ' || *p == '\t') p++;
    snprintf(dst, n, "%s", p);
    size_t len = strlen(dst);
    while (len && (dst[len - 1] == '\n' || dst[len - 1] == '\r' || dst[len - 1] == ' ')) dst[--len] = 0;
}

static void parse_gpu_line(struct gpu *g, const char *key, const char *line, int off) {
    char a[64], b[64];
    if (!strcmp(key, "name")) rest_of_line(g->name, sizeof g->name, line, off);
    else if (!strcmp(key, "uuid")) rest_of_line(g->uuid, sizeof g->uuid, line, off);
    else if (!strcmp(key, "util")) sscanf(line + off, "%u %u", &g->util_gpu, &g->util_mem);
    else if (!strcmp(key, "memory"))
        sscanf(line + off, "%llu %llu %llu", &g->mem_total, &g->mem_used, &g->mem_reserved);
    else if (!strcmp(key, "temp")) sscanf(line + off, "%u", &g->temp);
    else if (!strcmp(key, "power")) sscanf(line + off, "%u", &g->power_mw);
    else if (!strcmp(key, "power_limit")) sscanf(line + off, "%u", &g->power_limit_mw);
    else if (!strcmp(key, "power_mgmt_limit")) sscanf(line + off, "%u", &g->power_mgmt_limit_mw);
    else if (!strcmp(key, "sm_clock")) sscanf(line + off, "%u", &g->sm_clock);
    else if (!strcmp(key, "pcie")) sscanf(line + off, "%u %u", &g->pcie_tx, &g->pcie_rx);
    else if (!strcmp(key, "ecc")) sscanf(line + off, "%llu %llu", &g->ecc_corrected, &g->ecc_uncorrected);
    else if (!strcmp(key, "xid")) sscanf(line + off, "%u %u", &g->xid_total, &g->xid_code);
    else if (!strcmp(key, "mig_mode")) sscanf(line + off, "%d", &g->mig_mode);
    else if (!strcmp(key, "lost")) g->lost = 1;
    else if (!strcmp(key, "fail") && sscanf(line + off, "%63s %63s", a, b) == 2) {
        int f = field_index(a);
        if (f >= 0) g->fail[f] = parse_error(b);
        else fprintf(stderr, "fake_nvml: unknown field %s\n", a);
    } else
        fprintf(stderr, "fake_nvml: unknown gpu key %s\n", key);
}

static void parse_script(FILE *f) {
    char line[512], word[64], key[64], tok[64];
    int maxidx = -1;
    memset(&S, 0, sizeof S);
    snprintf(S.driver, sizeof S.driver, "%s", "535.261.03");
    S.count = -1;
    while (fgets(line, sizeof line, f)) {
        int idx, off = 0;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        if (sscanf(line, "%63s%n", word, &off) != 1) continue;
        if (!strcmp(word, "init") && sscanf(line + off, "%63s", tok) == 1) S.init_error = parse_error(tok);
        else if (!strcmp(word, "driver")) rest_of_line(S.driver, sizeof S.driver, line, off);
        else if (!strcmp(word, "count")) sscanf(line + off, "%d", &S.count);
        else if (!strcmp(word, "events_create") && sscanf(line + off, "%63s", tok) == 1)
            S.events_create_error = parse_error(tok);
        else if (!strcmp(word, "gpu")) {
            int off2 = 0;
            if (sscanf(line + off, "%d %63s%n", &idx, key, &off2) != 2 || idx < 0 || idx >= MAX_GPUS) continue;
            S.gpus[idx].present = 1;
            if (idx > maxidx) maxidx = idx;
            parse_gpu_line(&S.gpus[idx], key, line, off + off2);
        } else if (!strcmp(word, "mig")) {
            unsigned slot, gi, ci;
            unsigned long long total, used;
            char uuid[96];
            int off2 = 0;
            if (sscanf(line + off, "%d %u %u %u %llu %llu %95s%n", &idx, &slot, &gi, &ci, &total, &used, uuid,
                       &off2) != 7 || idx < 0 || idx >= MAX_GPUS || slot >= MAX_MIG)
                continue;
            struct mig *m = &S.gpus[idx].mig[slot];
            m->present = 1, m->gi = gi, m->ci = ci, m->total = total, m->used = used;
            snprintf(m->uuid, sizeof m->uuid, "%s", uuid);
            rest_of_line(m->name, sizeof m->name, line, off + off2);
        } else if (!strcmp(word, "proc") && S.nprocs < MAX_PROCS) {
            struct proc *p = &S.procs[S.nprocs];
            char used[64];
            int off2 = 0;
            if (sscanf(line + off, "%d %u %63s%n", &p->gpu, &p->pid, used, &off2) != 3) continue;
            p->used = strcmp(used, "na") ? strtoull(used, NULL, 10) : ~0ULL;
            p->gi = p->ci = NO_ID;
            p->mps = 0;
            const char *q = line + off + off2;
            int n;
            while (sscanf(q, "%63s%n", tok, &n) == 1) {
                if (!strncmp(tok, "gi=", 3)) p->gi = (unsigned)atoi(tok + 3);
                else if (!strncmp(tok, "ci=", 3)) p->ci = (unsigned)atoi(tok + 3);
                else if (!strcmp(tok, "mps")) p->mps = 1;
                q += n;
            }
            S.nprocs++;
        } else if (!strcmp(word, "putil") && S.nputils < MAX_PUTIL) {
            struct putil *u = &S.putils[S.nputils];
            u->ts = 0;
            if (sscanf(line + off, "%d %u %u %u %llu", &u->gpu, &u->pid, &u->sm, &u->mem, &u->ts) < 4) continue;
            S.nputils++;
        } else
            fprintf(stderr, "fake_nvml: unknown directive %s\n", word);
    }
    if (S.count < 0) S.count = maxidx + 1;
    if (S.count > MAX_GPUS) S.count = MAX_GPUS;
}

static void reload(void) {
    const char *path = getenv("FAKE_NVML_SCRIPT");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        /* no script: behave like a host without a driver */
        memset(&S, 0, sizeof S);
        S.init_error = NVML_ERROR_DRIVER_NOT_LOADED;
        stamp.loaded = 0;
        return;
    }
    if (stamp.loaded && st.st_dev == stamp.dev && st.st_ino == stamp.ino && st.st_size == stamp.size &&
        st.st_mtim.tv_sec == stamp.mtime.tv_sec && st.st_mtim.tv_nsec == stamp.mtime.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    parse_script(f);
    fclose(f);
    stamp.dev = st.st_dev, stamp.ino = st.st_ino, stamp.size = st.st_size, stamp.mtime = st.st_mtim;
    stamp.loaded = 1;
}

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

/* Every exported NVML function: count it, take the lock, reload the script, then run its body. */
#define API(name, params, args)                                                                           \
    static nvmlReturn_t name##_impl params;                                                              \
    __attribute__((visibility("default"))) nvmlReturn_t name params {                                   \
        pthread_mutex_lock(&mu);                                                                         \
        __atomic_add_fetch(&ncalls, 1, __ATOMIC_RELAXED);                                               \
        reload();                                                                                        \
        nvmlReturn_t r = name##_impl args;                                                              \
        pthread_mutex_unlock(&mu);                                                                       \
        return r;                                                                                        \
    }                                                                                                    \
    static nvmlReturn_t name##_impl params

typedef struct dev *nvmlDevice_t;
typedef void *nvmlEventSet_t;

/* Resolve a handle; fail with the scripted error of `field` (or lost / uninitialised). */
static nvmlReturn_t check(nvmlDevice_t d, int field, struct gpu **g, struct mig **m) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    int is_gpu = d >= &gpu_devs[0] && d < &gpu_devs[MAX_GPUS];
    int is_mig = d >= &mig_devs[0][0] && d < &mig_devs[0][0] + MAX_GPUS * MAX_MIG;
    if (!is_gpu && !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->gpu >= S.count || !S.gpus[d->gpu].present) return NVML_ERROR_INVALID_ARGUMENT;
    *g = &S.gpus[d->gpu];
    if (m) *m = NULL;
    if ((*g)->lost) return NVML_ERROR_GPU_IS_LOST;
    if (d->mig >= 0) {
        if (!(*g)->mig_mode || !(*g)->mig[d->mig].present) return NVML_ERROR_INVALID_ARGUMENT;
        if (!m) return NVML_ERROR_NOT_SUPPORTED;
        *m = &(*g)->mig[d->mig];
    }
    if (field >= 0 && (*g)->fail[field]) return (*g)->fail[field];
    return NVML_SUCCESS;
}

static nvmlReturn_t do_init(void) {
    if (S.init_error) return S.init_error;
    initialised++;
    return NVML_SUCCESS;
}

API(nvmlInit_v2, (void), ()) { return do_init(); }
API(nvmlInit, (void), ()) { return do_init(); }
API(nvmlInitWithFlags, (unsigned flags), (flags)) { (void)flags; return do_init(); }

API(nvmlShutdown, (void), ()) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (--initialised == 0)
        for (int i = 0; i < MAX_GPUS; i++) G[i].registered = 0;
    return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char *nvmlErrorString(nvmlReturn_t r) {
    __atomic_add_fetch(&ncalls, 1, __ATOMIC_RELAXED);
    return error_string(r);
}

API(nvmlSystemGetDriverVersion, (char *version, unsigned length), (version, length)) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (strlen(S.driver) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(version, S.driver);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_count(unsigned *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned)S.count;
    return NVML_SUCCESS;
}
API(nvmlDeviceGetCount_v2, (unsigned *count), (count)) { return get_count(count); }
API(nvmlDeviceGetCount, (unsigned *count), (count)) { return get_count(count); }

static nvmlReturn_t get_handle(unsigned index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned)S.count || !S.gpus[index].present) return NVML_ERROR_INVALID_ARGUMENT;
    if (S.gpus[index].lost) return NVML_ERROR_GPU_IS_LOST;
    if (S.gpus[index].fail[F_HANDLE]) return S.gpus[index].fail[F_HANDLE];
    gpu_devs[index].gpu = (int)index, gpu_devs[index].mig = -1;
    *device = &gpu_devs[index];
    return NVML_SUCCESS;
}
API(nvmlDeviceGetHandleByIndex_v2, (unsigned index, nvmlDevice_t *device), (index, device)) {
    return get_handle(index, device);
}
API(nvmlDeviceGetHandleByIndex, (unsigned index, nvmlDevice_t *device), (index, device)) {
    return get_handle(index, device);
}

API(nvmlDeviceGetIndex, (nvmlDevice_t d, unsigned *index), (d, index)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, -1, &g, NULL);
    if (r) return r;
    *index = (unsigned)d->gpu;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned length, const char *src) {
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

API(nvmlDeviceGetName, (nvmlDevice_t d, char *name, unsigned length), (d, name, length)) {
    struct gpu *g;
    struct mig *m;
    nvmlReturn_t r = check(d, F_NAME, &g, &m);
    if (r) return r;
    return copy_string(name, length, m ? m->name : g->name);
}

API(nvmlDeviceGetUUID, (nvmlDevice_t d, char *uuid, unsigned length), (d, uuid, length)) {
    struct gpu *g;
    struct mig *m;
    nvmlReturn_t r = check(d, F_UUID, &g, &m);
    if (r) return r;
    return copy_string(uuid, length, m ? m->uuid : g->uuid);
}

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
API(nvmlDeviceGetUtilizationRates, (nvmlDevice_t d, nvmlUtilization_t *u), (d, u)) {
    struct gpu *g;
    struct mig *m;
    nvmlReturn_t r = check(d, F_UTIL, &g, &m);
    if (r) return r;
    if (m || g->mig_mode) return NVML_ERROR_NOT_SUPPORTED; /* as on a real MIG-enabled A100/H100 */
    u->gpu = g->util_gpu, u->memory = g->util_mem;
    return NVML_SUCCESS;
}

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

static void memory_of(struct gpu *g, struct mig *m, unsigned long long *total, unsigned long long *used,
                      unsigned long long *reserved) {
    *total = m ? m->total : g->mem_total;
    *used = m ? m->used : g->mem_used;
    *reserved = m ? 0 : g->mem_reserved;
}

API(nvmlDeviceGetMemoryInfo, (nvmlDevice_t d, nvmlMemory_t *mem), (d, mem)) {
    struct gpu *g;
    struct mig *m;
    unsigned long long total, used, reserved;
    nvmlReturn_t r = check(d, F_MEMORY, &g, &m);
    if (r) return r;
    memory_of(g, m, &total, &used, &reserved);
    mem->total = total, mem->used = used + reserved, mem->free = total - used - reserved;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t d, nvmlMemory_v2_t *mem), (d, mem)) {
    struct gpu *g;
    struct mig *m;
    unsigned long long total, used, reserved;
    nvmlReturn_t r = check(d, F_MEMORY, &g, &m);
    if (r) return r;
    if (g->fail[F_MEMORY_V2]) return g->fail[F_MEMORY_V2];
    if (mem->version != MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory_of(g, m, &total, &used, &reserved);
    mem->total = total, mem->reserved = reserved, mem->used = used, mem->free = total - used - reserved;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetTemperature, (nvmlDevice_t d, unsigned sensor, unsigned *temp), (d, sensor, temp)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_TEMP, &g, NULL);
    if (r) return r;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = g->temp;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetPowerUsage, (nvmlDevice_t d, unsigned *mw), (d, mw)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_POWER, &g, NULL);
    if (r) return r;
    *mw = g->power_mw;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetEnforcedPowerLimit, (nvmlDevice_t d, unsigned *mw), (d, mw)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_POWER_LIMIT, &g, NULL);
    if (r) return r;
    *mw = g->power_limit_mw;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetPowerManagementLimit, (nvmlDevice_t d, unsigned *mw), (d, mw)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_POWER_MGMT_LIMIT, &g, NULL);
    if (r) return r;
    *mw = g->power_mgmt_limit_mw;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetClockInfo, (nvmlDevice_t d, unsigned type, unsigned *mhz), (d, type, mhz)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_CLOCK, &g, NULL);
    if (r) return r;
    if (type != 1) return NVML_ERROR_NOT_SUPPORTED; /* only NVML_CLOCK_SM is scripted */
    *mhz = g->sm_clock;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetPcieThroughput, (nvmlDevice_t d, unsigned counter, unsigned *kbps), (d, counter, kbps)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_PCIE, &g, NULL);
    if (r) return r;
    if (counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *kbps = counter == 0 ? g->pcie_tx : g->pcie_rx;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetTotalEccErrors, (nvmlDevice_t d, unsigned type, unsigned counter, unsigned long long *n),
    (d, type, counter, n)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_ECC, &g, NULL);
    if (r) return r;
    if (type > 1 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *n = (type == 0 ? g->ecc_corrected : g->ecc_uncorrected) + (counter == 1 ? 1000 : 0);
    return NVML_SUCCESS;
}

/* nvmlProcessInfo_v2_t, the layout of the _v3 entry points (pid, pad, usedGpuMemory, gi, ci): 24 bytes */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; }
    nvmlProcessInfo_t;

static nvmlReturn_t list_procs(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos, int mps) {
    struct gpu *g;
    struct mig *m;
    nvmlReturn_t r = check(d, mps ? F_MPS_PROCS : F_PROCS, &g, &m);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int i = 0; i < S.nprocs; i++) {
        struct proc *p = &S.procs[i];
        if (p->gpu != d->gpu || p->mps != mps || (m && p->gi != m->gi)) continue;
        if (infos && n < *count) {
            infos[n].pid = p->pid, infos[n].usedGpuMemory = p->used;
            infos[n].gpuInstanceId = p->gi, infos[n].computeInstanceId = p->ci;
        }
        n++;
    }
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos),
    (d, count, infos)) {
    return list_procs(d, count, infos, 0);
}
API(nvmlDeviceGetMPSComputeRunningProcesses_v3, (nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos),
    (d, count, infos)) {
    return list_procs(d, count, infos, 1);
}

/* nvmlProcessUtilizationSample_t: pid, pad, timeStamp, smUtil, memUtil, encUtil, decUtil: 32 bytes */
typedef struct { unsigned pid; unsigned long long timeStamp; unsigned smUtil, memUtil, encUtil, decUtil; }
    nvmlProcessUtilizationSample_t;

API(nvmlDeviceGetProcessUtilization,
    (nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples, unsigned *count, unsigned long long last_seen),
    (d, samples, count, last_seen)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_PROC_UTIL, &g, NULL);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    G[d->gpu].last_seen = last_seen;
    unsigned long long now = now_us();
    unsigned n = 0;
    for (int i = 0; i < S.nputils; i++) {
        struct putil *u = &S.putils[i];
        unsigned long long ts = u->ts ? u->ts : now;
        if (u->gpu != d->gpu || ts <= last_seen) continue;
        if (samples && n < *count) {
            samples[n].pid = u->pid, samples[n].timeStamp = ts;
            samples[n].smUtil = u->sm, samples[n].memUtil = u->mem;
            samples[n].encUtil = samples[n].decUtil = 0;
        }
        n++;
    }
    if (n == 0) return NVML_ERROR_NOT_FOUND; /* no samples newer than last_seen, as the real library */
    if (!samples || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetMigMode, (nvmlDevice_t d, unsigned *current, unsigned *pending), (d, current, pending)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_MIG, &g, NULL);
    if (r) return r;
    *current = *pending = (unsigned)g->mig_mode;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t d, unsigned *count), (d, count)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_MIG, &g, NULL);
    if (r) return r;
    *count = g->mig_mode ? MAX_MIG : 0;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetMigDeviceHandleByIndex, (nvmlDevice_t d, unsigned index, nvmlDevice_t *mig),
    (d, index, mig)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_MIG, &g, NULL);
    if (r) return r;
    if (d->mig >= 0 || !g->mig_mode) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig[index].present) return NVML_ERROR_NOT_FOUND;
    mig_devs[d->gpu][index].gpu = d->gpu, mig_devs[d->gpu][index].mig = (int)index;
    *mig = &mig_devs[d->gpu][index];
    return NVML_SUCCESS;
}

API(nvmlDeviceGetGpuInstanceId, (nvmlDevice_t d, unsigned *id), (d, id)) {
    struct gpu *g;
    struct mig *m;
    nvmlReturn_t r = check(d, F_MIG, &g, &m);
    if (r) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->gi;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetComputeInstanceId, (nvmlDevice_t d, unsigned *id), (d, id)) {
    struct gpu *g;
    struct mig *m;
    nvmlReturn_t r = check(d, F_MIG, &g, &m);
    if (r) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ events */

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

API(nvmlEventSetCreate, (nvmlEventSet_t *set), (set)) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (S.events_create_error) return S.events_create_error;
    *set = &event_set;
    return NVML_SUCCESS;
}

API(nvmlDeviceGetSupportedEventTypes, (nvmlDevice_t d, unsigned long long *types), (d, types)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_EVENTS, &g, NULL);
    if (r) return r;
    *types = XID_EVENT | 0x3ULL;
    return NVML_SUCCESS;
}

API(nvmlDeviceRegisterEvents, (nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set), (d, types, set)) {
    struct gpu *g;
    nvmlReturn_t r = check(d, F_EVENTS, &g, NULL);
    if (r) return r;
    if (set != &event_set || d->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~(XID_EVENT | 0x3ULL)) return NVML_ERROR_NOT_SUPPORTED;
    if ((types & XID_EVENT) && !(G[d->gpu].registered & XID_EVENT))
        G[d->gpu].xid_delivered = g->xid_total; /* only errors from now on are delivered */
    G[d->gpu].registered |= types;
    return NVML_SUCCESS;
}

API(nvmlEventSetWait_v2, (nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms),
    (set, data, timeout_ms)) {
    (void)timeout_ms; /* nothing ever arrives while waiting: scripted events are already pending */
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (set != &event_set) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < S.count; i++) {
        struct gpu *g = &S.gpus[i];
        if (!g->present || g->lost || !(G[i].registered & XID_EVENT) || G[i].xid_delivered >= g->xid_total)
            continue;
        G[i].xid_delivered++;
        gpu_devs[i].gpu = i, gpu_devs[i].mig = -1;
        data->device = &gpu_devs[i];
        data->eventType = XID_EVENT;
        data->eventData = g->xid_code;
        data->gpuInstanceId = data->computeInstanceId = NO_ID;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}

API(nvmlEventSetFree, (nvmlEventSet_t set), (set)) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (set != &event_set) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < MAX_GPUS; i++) G[i].registered = 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ test hooks */

__attribute__((visibility("default"))) unsigned long long fake_nvml_calls(void) {
    return __atomic_load_n(&ncalls, __ATOMIC_RELAXED);
}

__attribute__((visibility("default"))) unsigned long long fake_nvml_last_seen(int gpu) {
    return gpu >= 0 && gpu < MAX_GPUS ? G[gpu].last_seen : 0;
}

__attribute__((visibility("default"))) unsigned long long fake_nvml_registered(int gpu) {
    return gpu >= 0 && gpu < MAX_GPUS ? G[gpu].registered : 0;
}
