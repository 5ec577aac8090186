/* A payload for tests/gpu/hostile.sh: loaded by anything, it records which program loaded
 * it in /tmp/nvc-poc-marker. On the host that file must never appear. */
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void record(void) {
    char exe[4096] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = 0;
    FILE *m = fopen("/tmp/nvc-poc-marker", "a");
    if (m) { fprintf(m, "%s\n", exe); fclose(m); }
}
