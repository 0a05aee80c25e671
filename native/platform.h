/*
 * The platform layer: every call of the core that Linux has and other
 * systems do not (futexes, fallocate's KEEP_SIZE, the abstract socket
 * namespace) goes through here.  Built with CQ_PORTABLE defined (env
 * CQ_PORTABLE=1 for native/build_ffi.py, setup.py and native/Makefile), Linux
 * takes the same path as macOS: waits poll the word with bounded sleeps, wakes
 * are no-ops, reservations allocate inside the file's size only, and notify
 * sockets are named by a path in /tmp.  Without it, non-Linux systems get the
 * portable path too.  See native/README.md, "The platform layer".
 */
#ifndef AIOCHRONICLE_PLATFORM_H
#define AIOCHRONICLE_PLATFORM_H

#include <stdint.h>

#if !defined(CQ_PORTABLE) && !defined(__linux__)
#define CQ_PORTABLE 1
#endif

/* CDEF-BEGIN */
/* "linux" (futexes, fallocate, abstract sockets) or "portable". */
const char *cq_platform(void);
/* CDEF-END */

/* Wait while *word == expected, for up to timeout_ns: 0 when woken (or, on the
 * portable path, when the word changed), else ETIMEDOUT, EAGAIN (it differed
 * at the start), EINTR, or another errno. */
int cq_plat_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns);

/* Wake up to n waiters on word: how many were woken (the portable path's
 * pollers see the change themselves: 0), or -errno. */
int cq_plat_wake(const uint32_t *word, int n);

/* Reserve disk blocks for [off, off + len) of fd without changing its size:
 * 0 or an errno (ENOSPC/EDQUOT: the disk is full; EOPNOTSUPP: no way here). */
int cq_plat_reserve(int fd, uint64_t off, uint64_t len);

/* The datagram socket name of a notify owner written to out (room for 40
 * bytes), its length: "\0aiochronicle.notify.<16 hex>" in the abstract
 * namespace, or "/tmp/aiochronicle.n.<16 hex>" (a path) on the portable path. */
int cq_plat_sockname(const char *prefix_abstract, const char *prefix_path, uint64_t ident,
                     char *out);

/* A non-blocking, close-on-exec AF_UNIX datagram socket: its fd, or -1
 * (errno set).  Linux makes it in one call; the portable path sets the flags
 * with fcntl (macOS has no SOCK_CLOEXEC/SOCK_NONBLOCK). */
int cq_plat_dgram_socket(void);

/* sendto's flag against SIGPIPE where there is one (macOS has none, and its
 * AF_UNIX datagram sends raise no SIGPIPE). */
#include <sys/socket.h>
#ifdef MSG_NOSIGNAL
#define CQ_MSG_NOSIGNAL MSG_NOSIGNAL
#else
#define CQ_MSG_NOSIGNAL 0
#endif

#endif
