/* 4 KiB preads at descending offsets over a whole file, split over N threads (nothing merges: one
 * record per call and per page lookup). Prints {"seconds": S, "calls": N, "bytes": B}.
 * Used by bench_record.py "events".   cc -O2 -pthread -o pread_storm pread_storm.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct part { int fd; off_t first, last; long calls; };

static void *storm(void *arg)
{
    struct part *p = arg;
    char buf[4096];
    for (off_t off = p->last; off >= p->first; off -= 4096, p->calls++)
        if (pread(p->fd, buf, sizeof(buf), off) != sizeof(buf))
            exit(2);
    return NULL;
}

int main(int argc, char **argv)
{
    struct stat st;
    struct timespec a, b;
    int fd = argc > 1 ? open(argv[1], O_RDONLY) : -1;
    int n = argc > 2 ? atoi(argv[2]) : 1;
    pthread_t threads[64];
    struct part parts[64];
    long calls = 0;
    if (fd < 0 || fstat(fd, &st) < 0 || n < 1 || n > 64) {
        perror("pread_storm");
        return 1;
    }
    off_t pages = st.st_size / 4096, per = pages / n;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        parts[i] = (struct part){fd, i * per * 4096, ((i + 1) * per - 1) * 4096, 0};
        pthread_create(&threads[i], NULL, storm, &parts[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
        calls += parts[i].calls;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("{\"seconds\": %.6f, \"calls\": %ld, \"bytes\": %ld}\n",
           (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, calls, calls * 4096);
    return 0;
}
