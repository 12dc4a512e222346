// gputop's BPF program (bcc). Entry uprobes on the CUDA runtime and driver entry points,
// aggregated in the kernel into fixed-size per-process records; user space reads the maps
// once per refresh and computes deltas (counters are monotonic, never cleared).
//
// Laid out as bcc's libbpf-tools lay theirs: gputop.h holds what user space shares (the maps' types,
// the names of the constants gputop/sources/bpf/common/abi.py passes as -D, with the map sizes), this file
// the maps, and one *.bpf.h per concern the helpers and handlers, each after what it uses:
//   arch.bpf.h      what differs by architecture: arguments past the registers, the return address
//   bits.bpf.h      shared helpers: drops, hit counts, user and kernel reads, log2 buckets, bounded indices
//   identity.bpf.h  a process is (tgid, generation): its keys
//   share.bpf.h     each tenant's share of the tables: who owns a process's entries, what a tenant holds
//   calls.bpf.h     each call counted once: nested calls, the runtime's own calls, driver-level layers
//   names.bpf.h     kernel names: registrations, captured names, handles and what they stand for
//   graph.bpf.h     kernels inside CUDA graphs: contents, graph calls read at return
//   capture.bpf.h   stream captures: streams that record into a graph instead of running
//   sites.bpf.h     call sites: sampled launches' Python stacks (or native callers)
//   launch.bpf.h    kernel and graph launches: the launch slots (the fast path), the kernels table
//   alloc.bpf.h     allocations, frees and the ranges they leave (which memory an address is)
//   copy.bpf.h      memory copies by direction, one call or a batch
//   memset.bpf.h    memsets: runtime and driver, 1D, 2D and 3D
//   managed.bpf.h   managed memory: prefetches, CPU faults
//   sync.bpf.h      time blocked in synchronisations, and its latency histograms
//   nccl.bpf.h      NCCL collectives and point-to-point calls, groups, communicators created
//   life.bpf.h      process life and discovery: exec, executable mappings, fork, exit
// bcc rewrites map operations (procs.lookup(&k)) only in the text it is given, never in a file that
// text includes, so user space writes each of this directory's headers into the text in place of its
// #include (gputop/sources/bpf/program/ctext.py, with #line markers: messages name the header and its line).
#include <uapi/linux/ptrace.h>
#include "gputop.h"

BPF_HASH(procs, u64, struct proc_t, MAX_PROCS);         // key: pkey(tgid)
// processes with names or code ranges but maybe no record: their exit must still be reported
BPF_HASH(tracked, u64, u8, MAX_PROCS * 4);              // key: pkey(tgid)
BPF_HASH(kernels, struct tkey_t, struct kstat_t, MAX_KERNELS);
// The launch fast path. A hash lookup costs a call into the kernel here (~50 ns with its `ret` thunks,
// more than all the rest of the handler), an array lookup is a few inlined instructions. So a
// (process, kernel) counts its launches in a slot of a direct-mapped array, at a hash of the
// pair; its `kernels` entry (made first: the table's capacity and drops are unchanged) keeps the
// launches made while the slot belonged to another pair. A slot keeps the shape (grid and block
// sizes) of the pair's first launch and counts the launches of exactly that shape with one atomic
// add (user space derives their sums and buckets); other shapes add to their own counters, sums
// and log2 buckets (KS_GRID and KS_BLOCK places: a kernel's shapes rarely vary more; the rest go
// to the process record's histograms). Every counter only grows, so every figure user space adds
// up from them does too. User space maps the array (mmap, no system call per read), adds slot and
// entry, and frees a process's slots when it forgets it. MAX_KSLOTS is a power of two.
BPF_F_TABLE("array", u32, struct kslot_t, kslots, MAX_KSLOTS, BPF_F_MMAPABLE);
// Captures under way on the host: begun (0) and ended (1) counted here, (2) the captures of
// processes that exited capturing, counted by user space when it deletes their entries (each
// counter has one writer). Launches look for a capture only while begun - ended - forgotten > 0.
BPF_ARRAY(capture_n, u64, CAPTURES_FORGOTTEN + 1);      // [CAPTURES_BEGUN], [CAPTURES_ENDED], [CAPTURES_FORGOTTEN]
BPF_HASH(names, struct tkey_t, struct name_t, MAX_NAMES);
// __cudaRegisterFunction's names stay where the program keeps them (static data): per registration
// only the pointer and when it was made (boot-time ns: user space rejects an entry older than the
// process now holding that PID). Entries are allocated as they come: `import torch` registers
// ~100,000 kernels in every process, which a table of 256-byte names could never hold.
BPF_F_TABLE("hash", struct tkey_t, struct name_ptr_t, name_ptrs, MAX_NAME_PTRS, BPF_F_NO_PREALLOC);
BPF_HASH(allocs, struct tkey_t, struct alloc_t, MAX_ALLOCS);
// streams that began a capture under way (deleted at its end)
BPF_HASH(capturing, struct tkey_t, struct cap_t, MAX_CAPTURES);
// streams that joined a capture through an event recorded in it: an entry goes stale when its
// capture ends (dropped on use, else with its process); each tenant holds a share (bpf/share.bpf.h)
BPF_HASH(joined, struct tkey_t, struct cap_t, MAX_JOINED);
// events recorded into a capturing stream: waiting on one joins the capture (a share each, as joined)
BPF_HASH(capture_events, struct tkey_t, struct cap_t, MAX_CAPTURE_EVENTS);
BPF_F_TABLE("lpm_trie", struct range_key_t, u32, ranges, MAX_ALLOCS * 8, BPF_F_NO_PREALLOC);
// code of the CUDA runtime and driver in each process (filled by user space from /proc/PID/maps):
// CODE_CUDA, or CODE_LAYER for a driver-level interception layer's text (rule 7)
BPF_F_TABLE("lpm_trie", struct range_key_t, u32, code, MAX_CODE, BPF_F_NO_PREALLOC);
// [0]: 1 once user space has probed a driver-level layer (rule 7), anywhere on the host
BPF_ARRAY(layers, u32, 1);
BPF_TABLE("lru_hash", u32, struct via_t, via_layer, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pending_t, pend_alloc, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pending_t, pend_sync, MAX_THREADS);
// sync latency histograms: (process, SYNC_* API) -> its durations (sync.bpf.h); made at a process's first
// sync of the API, charged to its owner (SH_SYNC_HISTS)
BPF_F_TABLE("hash", struct tkey_t, struct slat_t, sync_hist, MAX_SYNC_HISTS, BPF_F_NO_PREALLOC);
BPF_PERCPU_ARRAY(zero_slat, struct slat_t, 1);
// ncclCommInitRank* under way: the communicator's size (size) and this process's rank in it (kind)
BPF_TABLE("lru_hash", u64, struct pending_t, pend_nccl, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pending_t, pend_name, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pend_cap_t, pend_capture, MAX_THREADS);
BPF_TABLE("lru_hash", u64, u64, exec_mmap, MAX_MMAPS);  // thread -> the struct file being mapped (or 1)
// fair share of the events (life.bpf.h): processes with a rescan asked and not yet taken (tgid -> when),
// and each tenant's events in its window and the events it lost
BPF_TABLE("lru_hash", u32, u64, rescan_pending, MAX_PROCS * 4);
BPF_TABLE("lru_hash", struct tenant_t, struct share_t, tenant_events, MAX_TENANTS);
// fair share of the tables (share.bpf.h): each process's owner (the tenant its entries are charged to),
// what each tenant holds and lost by class (the BPF side's) and what user space gave back of it
BPF_HASH(owners, u64, struct tenant_t, MAX_PROCS * 4);  // key: pkey(tgid)
// (LRU: a host that ran more tenants than MAX_TENANTS since gputop started, pod after pod, makes room by
// forgetting the one unused longest, which holds nothing by then; user space keeps what it had lost)
BPF_TABLE("lru_hash", struct tenant_t, struct held_t, tenant_held, MAX_TENANTS);
BPF_HASH(tenant_credit, struct tenant_t, struct credit_t, MAX_TENANTS);
BPF_PERCPU_ARRAY(zero_held, struct held_t, 1);
#ifdef FILE_KEYS
// files named to user space (-> when, under which change time): once per COALESCE_NS
BPF_TABLE("lru_hash", struct file_key_t, struct named_t, file_pending, MAX_MMAPS);
// files user space has classified (struct known_file_t): FILE_PROBED (its mappings still start a
// rescan: code ranges), FILE_NOT_CUDA (no event at all); least recently used ones make room
BPF_TABLE("lru_hash", struct file_key_t, struct known_file_t, known_files, MAX_FILES);
#endif
// driver or kernel handle -> the host stub or kernel it stands for (names resolved through it)
BPF_HASH(aliases, struct tkey_t, u64, MAX_NAMES);
BPF_PERCPU_ARRAY(zero_proc, struct proc_t, 1);
BPF_PERCPU_ARRAY(name_scratch, struct name_t, 1);
// what could not be counted or stored, by kind (DROP_PROCS ... DROP_GRAPHS: abi.DROP_KINDS)
BPF_ARRAY(dropped, u64, NDROP);
BPF_RINGBUF_OUTPUT(events, EVENT_PAGES);
// Probe hits, exact and cheap: every uprobe program counts its run here (a per-CPU add), so user space
// has the hits of each refresh interval; their cost is sampled (gputop/sources/bpf/cost/selfcost.py).
BPF_PERCPU_ARRAY(hits, struct hit_t, HIT_RETURN + 1);    // [HIT_ENTRY], [HIT_RETURN]

// call sites (sites.bpf.h): each process's CPython (user space writes it), each thread's thread state,
// the sampled stacks and their samples by kernel (charged to the process's owner as SH_CALL_SITES), the
// sampling period ([0]; 0: off) and what the walks cost ([0] ns, [1] walks of Python stacks; [2], [3] of
// native callers)
BPF_HASH(py_procs, u64, struct pyproc_t, MAX_PROCS);    // key: pkey(tgid)
BPF_TABLE("lru_hash", u64, u64, py_threads, MAX_THREADS);   // pid_tgid -> its PyThreadState
BPF_F_TABLE("hash", struct tkey_t, struct pystack_t, py_stacks, MAX_STACKS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct site_key_t, u64, py_sites, MAX_SITES, BPF_F_NO_PREALLOC);
BPF_ARRAY(site_period, u64, 1);
BPF_PERCPU_ARRAY(site_cost, u64, 4);
BPF_PERCPU_ARRAY(stack_scratch, struct stack_scratch_t, 1);
BPF_PROG_ARRAY(site_tail, 1);                           // [0]: site_walk (user space puts it there)

// A PID is one process only until that process exits, and the kernel may give it to a new process
// before user space has read the old one's last counts (a busy host, a refresh seconds long). So a
// process is (tgid, gen): every PID has a generation, bumped when a process gputop traces under it
// exits, and every key of a process's state holds both (procs, tracked: pkey; tkey_t, gkey_t, the
// tries' keys, a launch slot's owner), so a new process's calls never reach the old one's counts.
// Generations are bytes, eight to a word, indexed by PID (an inlined array lookup on the launch path);
// PID_GEN_WORDS covers the host's pid_max at load (-D from user space; a PID above it is gen 0).
BPF_F_TABLE("array", u32, u64, pid_gen, PID_GEN_WORDS, BPF_F_MMAPABLE);   // user space maps it (procid.PidGens)

// ------------------------------------------------------------------ kernels inside graphs
//
// A graph replay is one cudaGraphLaunch; its kernels pass no entry point. So gputop follows how each
// graph is built and counts, per graph launch, the kernels of the graph it replays (graph.bpf.h).
BPF_F_TABLE("hash", struct tkey_t, struct gid_t, gids, MAX_GRAPHS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct tkey_t, struct graph_t, graphs, MAX_GRAPHS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct tkey_t, u64, execs, MAX_GRAPHS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct gkey_t, u64, gnodes, MAX_GRAPH_NODES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct gkey_t, u64, gparts, MAX_GRAPHS, BPF_F_NO_PREALLOC);
// graph calls whose result is read at return (out-pointers, success), tracked by depth
BPF_TABLE("lru_hash", u64, struct pending_t, pend_graph, MAX_THREADS);

#include "arch.bpf.h"
#include "bits.bpf.h"
#include "identity.bpf.h"
#include "share.bpf.h"
#include "calls.bpf.h"
#include "names.bpf.h"
#include "graph.bpf.h"
#include "capture.bpf.h"
#include "sites.bpf.h"
#include "launch.bpf.h"
#include "alloc.bpf.h"
#include "copy.bpf.h"
#include "memset.bpf.h"
#include "managed.bpf.h"
#include "sync.bpf.h"
#include "nccl.bpf.h"
#include "life.bpf.h"
