/*
 * gen.c: the known-truth Criteo-layout generator (model in gen.h).
 *
 * Randomness: each row has its own xoshiro256** stream seeded from (seed, row index), so any
 * range of rows can be written on its own (--offset: a test set from the same model);
 * model parameters are pure functions of (seed, field, rank) through XXH3, so they need no memory
 * even for tens of millions of tokens. Zipf ranks come from rejection-inversion sampling
 * (Hoermann and Derflinger 1996), O(1) per draw for any vocabulary size.
 */
#include "gen.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/mix.h"
#include "../io/util.h"

#define N_INT 13
#define N_CAT 26
#define RANK 4

/* Criteo Kaggle's distinct tokens per categorical field. */
static const uint64_t base_vocab[N_CAT] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
};
static const double miss_cat[N_CAT] = {
    0, 0, 0.03, 0.03, 0, 0.12, 0, 0, 0, 0, 0, 0.03, 0, 0, 0, 0.03, 0, 0, 0.44, 0.44, 0.03, 0, 0,
    0.03, 0.44, 0.44,
};
static const double miss_int[N_INT] = {
    0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0, 0.04, 0.45, 0.04, 0.76, 0.22,
};
/* log-normal parameters of the integers */
static const double int_mu[N_INT] = { 0.8, 2.0, 2.3, 1.7, 7.5, 4.0, 1.5, 2.5, 3.5, 0.5, 1.0, 0.5, 1.6 };
static const double int_sd[N_INT] = { 1.0, 1.5, 1.3, 1.0, 2.0, 1.8, 1.2, 1.0, 1.3, 0.6, 0.9, 0.9, 1.0 };
static const double int_coef[N_INT] = { 0.25, -0.05, -0.08, 0.10, -0.12, 0.06, 0.18, 0.03, 0.05, 0.30, 0.20, 0.10, -0.10 };
/* fields whose tokens interact pairwise through rank-4 factors */
static const int inter_fields[] = { 0, 1, 4, 5, 7, 9, 12, 13, 17, 18 };
#define N_INTER ((int)(sizeof inter_fields / sizeof inter_fields[0]))
#define BIAS (-1.65)
#define INTER_SCALE 0.5

typedef struct {
    uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return res;
}

/* uniform in (0, 1) */
static double u01(uint64_t x) { return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double rng_u(rng *r) { return u01(rng_next(r)); }

static double gauss_from(uint64_t a, uint64_t b)
{
    return sqrt(-2.0 * log(u01(a))) * cos(6.283185307179586 * u01(b));
}

/* A parameter of (field, rank): standard normal, fixed by the seed. */
static double param(uint64_t seed, int field, uint64_t rank, int which)
{
    uint64_t in[3] = { rank, (uint64_t)field, (uint64_t)which };
    uint64_t a = XXH3_64bits_withSeed(in, sizeof in, seed);
    uint64_t b = XXH3_64bits_withSeed(in, sizeof in, seed ^ 0x5bd1e995ull);
    return gauss_from(a, b);
}

typedef struct {
    uint64_t n;
    double s, hx1, hn, sv;
} zipf;

static double helper1(double x) { return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
static double helper2(double x) { return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x)); }
static double zh(const zipf *z, double x) { return exp(-z->s * log(x)); }
static double zH(const zipf *z, double x)
{
    double lx = log(x);
    return helper2((1 - z->s) * lx) * lx;
}
static double zHinv(const zipf *z, double x)
{
    double t = x * (1 - z->s);
    if (t < -1) t = -1;
    return exp(helper1(t) * x);
}

static void zipf_init(zipf *z, uint64_t n, double s)
{
    z->n = n;
    z->s = s;
    z->hx1 = zH(z, 1.5) - 1;
    z->hn = zH(z, (double)n + 0.5);
    z->sv = 2 - zHinv(z, zH(z, 2.5) - zh(z, 2));
}

/* rank in 0 .. n-1 */
static uint64_t zipf_draw(const zipf *z, rng *r)
{
    for (;;) {
        double u = z->hn + rng_u(r) * (z->hx1 - z->hn);
        double x = zHinv(z, u);
        double kf = floor(x + 0.5);
        if (kf < 1) kf = 1;
        if (kf > (double)z->n) kf = (double)z->n;
        uint64_t k = (uint64_t)kf;
        if (kf - x <= z->sv || u >= zH(z, kf + 0.5) - zh(z, kf)) return k - 1;
    }
}

uint64_t gen_vocab(const gen_opts *o, int f)
{
    double v = (double)base_vocab[f] * (o->keys_scale > 0 ? o->keys_scale : 1.0);
    return v < 2 ? 2 : (uint64_t)(v + 0.5);
}

static double weight_scale(uint64_t vocab)
{
    return vocab < 1000 ? 0.6 : vocab < 100000 ? 0.35 : 0.2;
}

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10), v /= 10; while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

int gen_write(const gen_opts *o, FILE *out, FILE *truth)
{
    static const char hex[] = "0123456789abcdef";
    rng r;
    zipf z[N_CAT];
    uint64_t vocab[N_CAT];
    double wscale[N_CAT];
    int inter_slot[N_CAT];
    for (int f = 0; f < N_CAT; f++) {
        vocab[f] = gen_vocab(o, f);
        zipf_init(&z[f], vocab[f], 1.05 + 0.02 * (f % 7));
        wscale[f] = weight_scale(vocab[f]);
        inter_slot[f] = -1;
    }
    for (int i = 0; i < N_INTER; i++) inter_slot[inter_fields[i]] = i;
    /* Center each field's token weights on their Zipf-weighted mean over the head of the
     * vocabulary, so the CTR stays near Criteo's whatever the seed. */
    double wmean[N_CAT];
    for (int f = 0; f < N_CAT; f++) {
        uint64_t m = vocab[f] < 20000 ? vocab[f] : 20000;
        double num = 0, den = 0;
        for (uint64_t k = 0; k < m; k++) {
            double pk = pow((double)(k + 1), -z[f].s);
            num += pk * param(o->seed, f, k, 0);
            den += pk;
        }
        wmean[f] = num / den;
    }

    char line[1024];
    for (uint64_t row = o->offset; row < o->offset + o->rows; row++) {
        uint64_t x = o->seed ^ (row * 0xd1342543de82ef95ull);   /* each row its own stream */
        for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
        char *p = line + 2;   /* label written last */
        double logit = BIAS;
        for (int j = 0; j < N_INT; j++) {
            int missing = rng_u(&r) < miss_int[j];
            double g = gauss_from(rng_next(&r), rng_next(&r));
            *p++ = '\t';
            if (missing) continue;
            double v = floor(exp(int_mu[j] + int_sd[j] * g)) - 1;
            if (j == 1) v -= 3;   /* like Criteo's I2, some values are negative */
            if (v > 1e12) v = 1e12;
            if (v < 0) {
                *p++ = '-';
                p = put_u64(p, (uint64_t)-v);
            } else {
                p = put_u64(p, (uint64_t)v);
            }
            logit += int_coef[j] * (log1p(v > 0 ? v : 0) - int_mu[j]);
        }
        double fac[N_INTER][RANK];
        int have[N_INTER] = { 0 };
        for (int f = 0; f < N_CAT; f++) {
            int missing = rng_u(&r) < miss_cat[f];
            uint64_t rank = zipf_draw(&z[f], &r);
            *p++ = '\t';
            if (missing) continue;
            uint32_t tok = (uint32_t)XXH3_64bits_withSeed(&rank, sizeof rank, o->seed * 31 + (uint64_t)f);
            for (int k = 7; k >= 0; k--) p[7 - k] = hex[(tok >> (4 * k)) & 15];
            p += 8;
            logit += wscale[f] * (param(o->seed, f, rank, 0) - wmean[f]);
            int s = inter_slot[f];
            if (s >= 0) {
                for (int k = 0; k < RANK; k++) fac[s][k] = 0.35 * param(o->seed, f, rank, 1 + k);
                have[s] = 1;
            }
        }
        for (int a = 0; a < N_INTER; a++)
            for (int b = a + 1; b < N_INTER; b++) {
                if (!have[a] || !have[b]) continue;
                double dot = 0;
                for (int k = 0; k < RANK; k++) dot += fac[a][k] * fac[b][k];
                logit += INTER_SCALE * dot;
            }
        double prob = 1 / (1 + exp(-logit));
        int label = rng_u(&r) < prob;
        line[1] = (char)('0' + label);
        *p++ = '\n';
        if (fwrite(line + 1, 1, (size_t)(p - line - 1), out) != (size_t)(p - line - 1)) return -(errno ? errno : EIO);
        if (truth && fprintf(truth, "%d\t%.9g\n", label, prob) < 0) return -(errno ? errno : EIO);
    }
    return 0;
}
