/*
 * test_keymap.c: io/keymap.h against a plain array of the same entries: puts, deletions (the
 * backward shift), sets with keys 0 and UINT64_MAX, rehashing, and puts from several threads.
 */
#include <criterion/criterion.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/keymap.h"

TestSuite(keymap);

/* keys that collide on purpose: few distinct home slots in a small map */
static uint64_t key_of(uint64_t i, int clustered) { return clustered ? i * 1024 : splitmix64(&i); }

Test(keymap, puts_and_deletes_match_an_array)
{
    for (int clustered = 0; clustered < 2; clustered++) {
        enum { N = 3000 };
        uint64_t keys[N], vals[N];
        int live[N] = { 0 };
        key_map m;
        key_map_init(&m, 8192);
        uint64_t s = 7;
        for (int i = 0; i < N; i++) {
            keys[i] = key_of((uint64_t)i, clustered);
            vals[i] = splitmix64(&s) | 1;
        }
        for (int round = 0; round < 20000; round++) {
            int i = (int)(splitmix64(&s) % N);
            if (live[i]) key_map_del(&m, keys[i]);
            else key_map_put_new(&m, keys[i], vals[i]);
            live[i] = !live[i];
            if (round % 997 == 0)
                for (int j = 0; j < N; j++)
                    cr_assert_eq(key_map_get(&m, keys[j]), live[j] ? vals[j] : 0, "round %d key %d", round, j);
        }
        key_map_rehash(&m, 16384);
        for (int j = 0; j < N; j++) cr_assert_eq(key_map_get(&m, keys[j]), live[j] ? vals[j] : 0);
        key_map_free(&m);
    }
}

Test(keymap, sets_hold_every_key)
{
    key_map m = { 0 };
    uint64_t special[] = { 0, UINT64_MAX, 1 };
    for (int i = 0; i < 3; i++) cr_assert_eq(key_set_add(&m, special[i]), 1);
    for (int i = 0; i < 3; i++) cr_assert_eq(key_set_add(&m, special[i]), 0);
    for (uint64_t i = 2; i < 100000; i++) cr_assert_eq(key_set_add(&m, i), 1);
    cr_assert_eq(m.n, 100001);
    cr_assert_leq(m.n * 2, m.cap, "load at most 1/2");
    for (uint64_t i = 0; i < 100000; i++) cr_assert_eq(key_map_get(&m, i), 1);
    cr_assert_eq(key_map_get(&m, UINT64_MAX), 1);
    cr_assert_eq(key_map_get(&m, 100000), 0);
    key_map_free(&m);
}

Test(keymap, shared_puts_from_threads)
{
    enum { N = 200000 };
    key_map m;
    key_map_init(&m, 1 << 19);
    #pragma omp parallel for num_threads(4)
    for (uint64_t i = 0; i < N; i++) key_map_put_shared(&m, key_of(i, 1), i + 1);
    for (uint64_t i = 0; i < N; i++) cr_assert_eq(key_map_get(&m, key_of(i, 1)), i + 1);
    key_map_free(&m);
}

/* A field of /proc/self/status, in kB */
static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (kb < 0 && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) kb = atol(line + n);
    fclose(f);
    cr_assert_geq(kb, 0, "%s in /proc/self/status", field);
    return kb;
}

/* A map doubling from 64 to 128 MB of slots: the process's peak rises by about the new map's
 * bytes less the old one's, not by the new map's whole (both held at once). */
Test(keymap, a_growing_map_holds_about_the_new_one_not_both)
{
    enum { OLD = 1 << 22 };   /* slots of 16 bytes: 64 MB */
    key_map m;
    key_map_init(&m, OLD);
    uint64_t s = 11;
    for (uint64_t i = 0; i < OLD / 2; i++) key_map_put_new(&m, splitmix64(&s), i + 1);
    long rss0 = status_kb("VmRSS:");
    FILE *f = fopen("/proc/self/clear_refs", "w");   /* the peak starts again from the resident set */
    cr_assert_not_null(f);
    cr_assert_geq(fputs("5", f), 0);
    cr_assert_eq(fclose(f), 0);
    cr_assert_leq(status_kb("VmHWM:"), rss0 + 1024);
    key_map_rehash(&m, 2 * OLD);
    long peak = status_kb("VmHWM:");
#ifdef __SANITIZE_ADDRESS__
    long shadow = 2L * OLD * 16 / 8 / 1024;   /* AddressSanitizer's shadow of the new map, a byte for 8: 16 MB */
#else
    long shadow = 0;
#endif
    cr_assert_leq(peak - rss0, (64 + 16) * 1024 + shadow, "the peak rose by %ld kB (the new map's 128 MB with the old one's "
                  "64 MB given back as read: about 64 MB%s)", peak - rss0, shadow ? ", and 16 MB of AddressSanitizer's shadow" : "");
    s = 11;
    for (uint64_t i = 0; i < OLD / 2; i++) cr_assert_eq(key_map_get(&m, splitmix64(&s)), i + 1);
    key_map_free(&m);
}

Test(keymap, vectors_grow_and_fit)
{
    key_vec v = { 0 };
    for (uint64_t i = 0; i < 5000; i++) key_vec_push(&v, i * 3);
    key_vec_fit(&v);
    cr_assert_eq(v.n, 5000);
    cr_assert_eq(v.cap, 5000);
    for (uint64_t i = 0; i < 5000; i++) cr_assert_eq(v.k[i], i * 3);
    key_vec_free(&v);
    cr_assert_null(v.k);
}

Test(keymap, compact_index_over_a_key_array)
{
    enum { N = 50000 };
    key_index x = { 0 };
    key_index_reserve(&x, N);
    uint64_t *keys = malloc(N * sizeof *keys);
    uint32_t *pos = malloc(N * sizeof *pos);
    size_t n = 0;
    for (int round = 0; round < 2; round++) {   /* the second round reuses the emptied slots */
        n = 0;
        for (uint64_t i = 0; i < 3 * N; i++) {
            uint64_t key = key_of(i % N, round);
            uint32_t *s = key_index_slot(&x, keys, key);
            if (*s) {
                cr_assert_eq(keys[*s - 1], key);
                continue;
            }
            keys[n] = key;
            *s = (uint32_t)++n;
            pos[n - 1] = (uint32_t)(s - x.s);
        }
        cr_assert_eq(n, N, "every key once");
        for (size_t j = 0; j < n; j++) x.s[pos[j]] = 0;
    }
    for (size_t i = 0; i < x.cap; i++) cr_assert_eq(x.s[i], 0);
    key_index_free(&x);
    free(keys);
    free(pos);
}
