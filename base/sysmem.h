/*
 * sysmem.h - the host memory a process can take now: /proc/meminfo's
 * MemAvailable (free memory plus the page cache and other memory the kernel
 * gives back on demand), not MemFree: right after a node reads a model file,
 * that file sits in the page cache and MemFree is a small part of what a new
 * allocation can get (a 24 GiB machine with a 9 GB file cached: 0.4 GiB free,
 * 23 GiB available).
 */
#ifndef SW_SYSMEM_H
#define SW_SYSMEM_H

#include <stdint.h>

/* Bytes available for new allocations now: MemAvailable, else (no
 * /proc/meminfo, or a kernel without the field) the free pages; -1 when
 * neither is known. */
int64_t sw_host_mem_available(void);

/* The MemAvailable line of a meminfo text in bytes, or -1 when it has none
 * (the parser under sw_host_mem_available, for tests). */
int64_t sw_meminfo_available(const char *text);

#endif
