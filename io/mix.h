/*
 * mix.h: the 64-bit integer mixers shared by the hash tables and seeded generators.
 * mix64: MurmurHash3's finaliser (a bijection; spreads keys over table slots).
 * splitmix64: SplitMix64's step (advances *state, returns a well-mixed value).
 */
#ifndef CTRBOX_MIX_H
#define CTRBOX_MIX_H

#include <stdint.h>

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static inline uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
