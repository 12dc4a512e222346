// A process is (tgid, generation) (gputop.bpf.c, pid_gen): its generation and its keys (its record:
// share.bpf.h, which charges it to its tenant).
#ifndef __IDENTITY_BPF_H
#define __IDENTITY_BPF_H

static __always_inline u32 gen_of(u32 tgid) {
    u32 i = tgid >> 3;
    u64 *w = pid_gen.lookup(&i);
    return w ? (*(volatile u64 *)w >> ((tgid & 7) * 8)) & GEN_MASK : 0;
}

static __always_inline u64 pkey_gen(u32 tgid, u32 gen) {
    return tgid | (u64)gen << GEN_SHIFT;
}

static __always_inline u64 pkey(u32 tgid) {
    return pkey_gen(tgid, gen_of(tgid));
}

// at the exit of a traced process: its PID's next process is a new one (each byte wraps on its own:
// a wrap adds nothing to its neighbour; only this PID's exit writes its byte)
static __always_inline void gen_bump(u32 tgid) {
    u32 i = tgid >> 3;
    u64 *w = pid_gen.lookup(&i);
    if (!w)
        return;
    u32 sh = (tgid & 7) * 8;
    u64 lane = (*(volatile u64 *)w >> sh) & GEN_MASK;
    __sync_fetch_and_add(w, lane == GEN_MASK ? -((u64)GEN_MASK << sh) : 1ULL << sh);
}

// the key of (process, address) in the LPM tries (ranges, code): tgid, gen and address, big-endian,
// matching the first 64 + bits bits
static __always_inline void range_key(struct range_key_t *k, u32 tgid, u64 addr, u32 bits) {
    u32 gen = gen_of(tgid);
    k->prefixlen = 64 + bits;
    k->data[0] = tgid >> 24; k->data[1] = tgid >> 16; k->data[2] = tgid >> 8; k->data[3] = tgid;
    k->data[4] = 0; k->data[5] = 0; k->data[6] = 0; k->data[7] = gen;
    k->data[8] = addr >> 56; k->data[9] = addr >> 48; k->data[10] = addr >> 40;
    k->data[11] = addr >> 32; k->data[12] = addr >> 24; k->data[13] = addr >> 16;
    k->data[14] = addr >> 8; k->data[15] = addr;
}

#endif /* __IDENTITY_BPF_H */
