/* A tenant's churn of process life (issue 40), as fast as the kernel allows, for SECONDS:
 *   map_churn FILE SECONDS          map FILE executable and unmap it (the review's freeze)
 *   map_churn FILE SECONDS chmod    the same, FILE's mode changed before each mapping (its change
 *                                   time moves: a tracer keying files by it sees a new file each time)
 *   map_churn LIBCUDART SECONDS fork  launch once through LIBCUDART (a traced process), then fork
 *                                   children that exit at once
 * Says "mapping PID" once started, then how many mappings (or forks) it made. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: map_churn FILE SECONDS [chmod]\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    /* one page, the ELF header's: no breakpoint to install, so the kernel maps it fastest (the whole
     * file, text and probes and all, maps 20 times slower) */
    size_t size = 4096;
    int chmods = argc > 3 && strcmp(argv[3], "chmod") == 0;
    int forks = argc > 3 && strcmp(argv[3], "fork") == 0;
    double end = now() + atof(argv[2]);
    unsigned long n = 0;
    if (forks) {
        void *rt = dlopen(argv[1], RTLD_NOW);
        int (*launch)(const void *, unsigned long long, unsigned, unsigned long long, unsigned, void **,
                      size_t, void *) = rt ? (void *)dlsym(rt, "cudaLaunchKernel") : NULL;
        if (!launch) {
            fprintf(stderr, "map_churn: no cudaLaunchKernel in %s\n", argv[1]);
            return 1;
        }
        launch((const void *)main, 1ULL | 1ULL << 32, 1, 1ULL | 1ULL << 32, 1, NULL, 0, NULL);  /* fails: no driver */
    }
    printf("mapping %d\n", (int)getpid());
    fflush(stdout);
    while (forks && now() < end) {
        for (int i = 0; i < 64; i++, n++) {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            if (pid > 0)
                waitpid(pid, NULL, 0);
        }
    }
    while (now() < end) {
        for (int i = 0; i < 256; i++) {
            if (chmods && fchmod(fd, (n & 1) ? 0755 : 0775) != 0) {
                perror("fchmod");
                return 1;
            }
            void *p = mmap(NULL, size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
            munmap(p, size);
            n++;
        }
    }
    printf("%lu\n", n);
    return 0;
}
