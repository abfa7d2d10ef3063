/* 4 KiB preads at descending offsets over a whole file (nothing merges: one record per call and
 * per page lookup). Prints {"seconds": S, "calls": N, "bytes": B}. Used by bench_record.py "events". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char buf[4096];
    struct stat st;
    struct timespec a, b;
    long calls = 0;
    int fd = argc > 1 ? open(argv[1], O_RDONLY) : -1;
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror("pread_storm");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (off_t off = (st.st_size / 4096 - 1) * 4096; off >= 0; off -= 4096, calls++)
        if (pread(fd, buf, sizeof(buf), off) != sizeof(buf))
            return 2;
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("{\"seconds\": %.6f, \"calls\": %ld, \"bytes\": %ld}\n",
           (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, calls, calls * 4096);
    return 0;
}
