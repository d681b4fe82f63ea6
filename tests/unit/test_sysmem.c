/*
 * test_sysmem.c - the host memory a node sizes its KV cache and its offer to
 * placement by (base/sysmem.h): MemAvailable, not MemFree. A node that read
 * MemFree on a machine whose page cache held a big model file planned for a
 * few hundred MiB out of 23 GiB available, and an auto node could not take a
 * 15-layer range of SmolLM2 (test_place_claims failed that way on a 24 GiB
 * machine after a 9 GB file was read).
 */
#include <stdio.h>
#include <string.h>

#include "sw_test.h"
#include "sysmem.h"

int main(void)
{
    /* the field, wherever it sits, in bytes */
    SW_CHECK(sw_meminfo_available("MemTotal:       24730624 kB\n"
                                  "MemFree:          401232 kB\n"
                                  "MemAvailable:   23953408 kB\n"
                                  "Buffers:           10240 kB\n") == 23953408LL * 1024);
    SW_CHECK(sw_meminfo_available("MemAvailable: 1 kB") == 1024);
    /* no field, or one that does not parse: -1 (the caller falls back to the free pages) */
    SW_CHECK_INT((int)sw_meminfo_available("MemTotal: 100 kB\nMemFree: 50 kB\n"), -1);
    SW_CHECK_INT((int)sw_meminfo_available("MemAvailable: lots\n"), -1);
    SW_CHECK_INT((int)sw_meminfo_available("MemAvailable: 100 MB\n"), -1);
    SW_CHECK_INT((int)sw_meminfo_available("MemAvailable: -5 kB\n"), -1);
    SW_CHECK_INT((int)sw_meminfo_available(""), -1);
    /* a line that only ends in the name is not the field */
    SW_CHECK_INT((int)sw_meminfo_available("XMemAvailable: 100 kB\n"), -1);

    /* this machine: what the kernel says is available, never just the free pages */
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        sw_test_skip("no /proc/meminfo");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const int64_t want = sw_meminfo_available(buf), got = sw_host_mem_available();
    printf("MemAvailable %lld MiB, sw_host_mem_available %lld MiB\n", (long long)(want >> 20),
           (long long)(got >> 20));
    SW_CHECK(want > 0);
    /* read twice, a moment apart: within 256 MiB of each other */
    SW_CHECK(got > 0 && (got > want ? got - want : want - got) < (256LL << 20));
    return sw_test_done();
}
