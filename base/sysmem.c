/*
 * sysmem.c - the host memory available now (sysmem.h).
 */
#include "sysmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t sw_meminfo_available(const char *text)
{
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, "MemAvailable:", 13) != 0)
            continue;
        char *end = NULL;
        long long kib = strtoll(p + 13, &end, 10);
        if (end == p + 13 || kib < 0)
            return -1;
        while (*end == ' ' || *end == '\t')
            end++;
        if (strncmp(end, "kB", 2) != 0)
            return -1;
        return (int64_t)kib * 1024;
    }
    return -1;
}

int64_t sw_host_mem_available(void)
{
    char buf[4096];
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        int64_t avail = sw_meminfo_available(buf);
        if (avail >= 0)
            return avail;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page : -1;
}
