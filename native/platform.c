/*
 * The platform layer (platform.h): Linux calls, and the portable path.
 */
#define _GNU_SOURCE
#include "platform.h"
#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef CQ_PORTABLE
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

const char *cq_platform(void) {
#ifdef CQ_PORTABLE
    return "portable";
#else
    return "linux";
#endif
}

#ifndef CQ_PORTABLE

static long futex(const uint32_t *word, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

int cq_plat_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    return futex(word, FUTEX_WAIT, expected, &ts) == 0 ? 0 : errno;
}

int cq_plat_wake(const uint32_t *word, int n) {
    long r = futex(word, FUTEX_WAKE, (uint32_t)n, NULL);
    return r < 0 ? -errno : (int)r;
}

int cq_plat_reserve(int fd, uint64_t off, uint64_t len) {
    int r;
    do {
        r = fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    } while (r != 0 && errno == EINTR);
    return r == 0 ? 0 : errno;
}

#else /* CQ_PORTABLE */

/* Poll the word: sleeps from 20 us doubling to 1 ms, never past the timeout
 * (so a wake-up is seen within about a millisecond). */
int cq_plat_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
    if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != expected) return EAGAIN;
    uint64_t deadline = cq_now_ns() + timeout_ns;
    uint64_t step = 20000;
    for (;;) {
        uint64_t now = cq_now_ns();
        if (now >= deadline) return ETIMEDOUT;
        uint64_t nap = deadline - now < step ? deadline - now : step;
        struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR) return EINTR;
        if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != expected) return 0;
        if (step < 1000000) step *= 2;
    }
}

int cq_plat_wake(const uint32_t *word, int n) {
    (void)word;
    (void)n;
    return 0;
}

/* Only the part inside the file's size is reserved (what macOS's
 * F_PREALLOCATE and a size-keeping fallocate agree on); the rest is reserved
 * when the file has grown over it and it is asked for again. */
int cq_plat_reserve(int fd, uint64_t off, uint64_t len) {
    struct stat st;
    if (fstat(fd, &st) != 0) return errno;
    uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (off >= size) return 0;
    if (len > size - off) len = size - off;
    int r;
#if defined(__APPLE__)
    /* from the physical end of the file up to off + len (untested here) */
    fstore_t want = {F_ALLOCATEALL, F_PEOFPOSMODE, 0, (off_t)(off + len), 0};
    do {
        r = fcntl(fd, F_PREALLOCATE, &want);
    } while (r != 0 && errno == EINTR);
#elif defined(__linux__)
    /* mode 0 inside the size: the size does not change (glibc's
     * posix_fallocate would write zeros where the file system has no
     * fallocate, over bytes a writer may be writing) */
    do {
        r = fallocate(fd, 0, (off_t)off, (off_t)len);
    } while (r != 0 && errno == EINTR);
#else
    errno = EOPNOTSUPP;
    r = -1;
#endif
    return r == 0 ? 0 : errno;
}

#endif /* CQ_PORTABLE */

int cq_plat_sockname(const char *prefix_abstract, const char *prefix_path, uint64_t ident,
                     char *out) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
#ifdef CQ_PORTABLE
    (void)prefix_abstract;
    size_t plen = strlen(prefix_path);
    memcpy(out, prefix_path, plen);
    n = plen;
#else
    (void)prefix_path;
    size_t plen = strlen(prefix_abstract);
    out[0] = '\0'; /* the abstract namespace */
    memcpy(out + 1, prefix_abstract, plen);
    n = 1 + plen;
#endif
    for (int i = 0; i < 16; i++) out[n + (size_t)i] = hex[(ident >> (60 - 4 * i)) & 0xF];
    return (int)(n + 16);
}

int cq_plat_dgram_socket(void) {
#ifndef CQ_PORTABLE
    return socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
#else
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (fd < 0) return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
#endif
}
