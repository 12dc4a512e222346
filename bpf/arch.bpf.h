// What differs by architecture: where a uprobe finds the arguments of the probed call and its return address
// (docs/collector.md, "Per architecture"). bcc compiles for the host's architecture (its triple: __x86_64__
// or __aarch64__ is defined, and helpers.h's bpf_target_*), and PT_REGS_PARM1..6, PT_REGS_SP and PT_REGS_RC
// are bcc's for it. The rest is here:
//
//   x86-64 (System V):  six integer arguments in rdi, rsi, rdx, rcx, r8, r9, the seventh on at [sp + 8]
//                       (the return address is at [sp]); a struct of up to 16 bytes by value takes one or
//                       two of them (a dim3: x|y<<32, z), a larger one is copied onto the stack.
//   arm64 (AAPCS64):    eight in x0..x7, the ninth on at [sp] (nothing else is on the stack at the entry:
//                       the return address is in x30, the link register); a struct of up to 16 bytes takes
//                       one or two registers as on x86-64, a larger one is copied by the caller and passed
//                       by its address, in the next register.
//
// ARG7(ctx), ARG8(ctx): the seventh and eighth integer arguments (a read of the stack on x86-64).
// STACK_ARG(ctx, n): the address of the n-th (0-based) argument passed on the stack.
// RA_SLOT(ctx): where the return address is at the entry (x86-64: its address, [sp]; arm64: the value of
// x30 itself); RA_OF(slot) the return address from it (a read on x86-64 only). Kept apart so that the launch
// path reads nothing until a sample asks for the caller.
// BIG_BYVAL(ctx, i, stack_off): the address of a struct of over 16 bytes passed by value as argument i
// (1-based, counting only the arguments before it): x86-64 copies it to [sp + stack_off], arm64 passes a
// pointer to its copy in that argument's register.
#ifndef __ARCH_BPF_H
#define __ARCH_BPF_H

#if defined(__aarch64__) || defined(bpf_target_arm64)
#define GPUTOP_ARM64 1
#define ARG7(ctx) ((ctx)->regs[6])
#define ARG8(ctx) ((ctx)->regs[7])
#define STACK_ARG(ctx, n) (PT_REGS_SP(ctx) + 8 * (n))
#define RA_SLOT(ctx) ((ctx)->regs[30])
#define RA_OF(slot) (slot)
#define BIG_BYVAL(ctx, i, stack_off) (ARG_REG(ctx, i))
#define ARG_REG(ctx, i) ((ctx)->regs[(i) - 1])
#elif defined(__x86_64__) || defined(bpf_target_x86)
#define ARG7(ctx) read_u64(PT_REGS_SP(ctx) + 8)
#define ARG8(ctx) read_u64(PT_REGS_SP(ctx) + 16)
#define STACK_ARG(ctx, n) (PT_REGS_SP(ctx) + 8 + 8 * (n))
#define RA_SLOT(ctx) PT_REGS_SP(ctx)
#define RA_OF(slot) read_u64(slot)
#define BIG_BYVAL(ctx, i, stack_off) (PT_REGS_SP(ctx) + (stack_off))
#else
#error "gputop's BPF program knows the calling conventions of x86-64 and arm64 only"
#endif

#endif /* __ARCH_BPF_H */
