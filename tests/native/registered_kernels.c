// Kernels registered as nvcc's registration callback registers them (tests/unit/test_regcode.py,
// tests/bpf/test_faults.py): each a call of __cudaRegisterFunction with constants, the host stub a
// function of internal linkage whose symbol is not its device name (an extended lambda's stub is named
// apart from its device function: PyTorch's elementwise kernels). Built as a shared object linked
// against the runtime (its PLT) or, with -DOWN_REGISTER, into a program that defines the function.
// register_kernels() is what a constructor calls at load (nvcc's); kernel_stub(i) gives stub i's address.

#ifdef OWN_REGISTER
// as the static runtime's: not inlined, its arguments kept (noipa)
__attribute__((noipa)) void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize) {
    (void)h, (void)hostFun, (void)deviceFun, (void)deviceName, (void)thread_limit;
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
}
#else
extern void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
#endif

static void host_side_stub(void) { __asm__ volatile("nop"); }
static void second_stub(void) { __asm__ volatile("nop; nop"); }

__attribute__((noinline)) void register_kernels(void **handle) {
    __cudaRegisterFunction(handle, (const char *)host_side_stub, (char *)"_ZN6gputop4test13device_lambdaIZ4mainEUlfE_EEvT_",
                           "_ZN6gputop4test13device_lambdaIZ4mainEUlfE_EEvT_", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(handle, (const char *)second_stub, (char *)"second_kernel", "second_kernel", -1, 0, 0, 0,
                           0, 0);
}

void *kernel_stub(int i) { return i ? (void *)second_stub : (void *)host_side_stub; }

#ifdef OWN_REGISTER
int main(void) {
    register_kernels(0);
    return kernel_stub(0) == kernel_stub(1);
}
#endif
