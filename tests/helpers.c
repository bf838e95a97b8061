/*
 * helpers.c: test helpers (see helpers.h).
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

static char tmpdir[256];

const char *th_tmpdir(void)
{
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ctrbox-test-XXXXXX");
        cr_assert_not_null(mkdtemp(tmpdir));
    }
    return tmpdir;
}

void th_cleanup(void)
{
    if (!tmpdir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    tmpdir[0] = 0;
}

const char *th_path(const char *name)
{
    static char ring[8][512];
    static int k;
    char *p = ring[k++ % 8];
    snprintf(p, 512, "%s/%s", th_tmpdir(), name);
    return p;
}

void th_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

void th_write_str(const char *path, const char *s) { th_write(path, s, strlen(s)); }

char *th_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

int th_run(char **out, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    const char *bin = getenv("CTRBOX_BIN");
    char full[9000];
    snprintf(full, sizeof full, "B='%s'; cd '%s' && { %s ; } 2>&1", bin ? bin : "bin", th_tmpdir(), cmd);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

const char *th_shared_data(void)
{
    static const char *cands[] = { "../shared/data", "../../shared/data" };
    static char abs_path[4096];
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        struct stat st;
        if (stat(cands[i], &st) == 0 && S_ISDIR(st.st_mode) && realpath(cands[i], abs_path)) return abs_path;
    }
    return NULL;
}

int th_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

void th_write_gzip(const char *path, const void *data, size_t len)
{
    gzFile g = gzopen(path, "wb");
    cr_assert_not_null(g);
    if (len) cr_assert_eq(gzwrite(g, data, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(g), Z_OK);
}

void th_write_zstd(const char *path, const void *data, size_t len)
{
    size_t cap = ZSTD_compressBound(len);
    void *buf = malloc(cap);
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);   /* as the zstd tool writes by default */
    size_t n = ZSTD_compress2(c, buf, cap, data, len);
    ZSTD_freeCCtx(c);
    cr_assert(!ZSTD_isError(n));
    th_write(path, buf, n);
    free(buf);
}

void th_same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = th_read(th_path(a), &la), *y = th_read(th_path(b), &lb);
    cr_assert(la > 0 && la == lb && memcmp(x, y, la) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* The bundle at path, its checksum left out and its JSON without the keys that name where its model
 * came from ("source_table_id", and "state" and "since_state", which for a tiered model hash its
 * folder's id): *len bytes. */
static char *bundle_without_source(const char *path, size_t *len)
{
    size_t n;
    char *x = th_read(th_path(path), &n);
    uint64_t jl;
    cr_assert(n > 32 && !memcmp(x, "CTRBXBDL", 8), "%s: not a bundle", path);
    memcpy(&jl, x + 16, 8);
    cr_assert(24 + jl + 8 <= n, "%s: truncated", path);
    char *out = malloc(n), *json = x + 24;
    memcpy(out, x, 16);
    size_t w = 16;
    static const char *const keys[] = { ",\"source_table_id\":\"", ",\"state\":\"", ",\"since_state\":\"" };
    for (size_t i = 0; i < jl;) {   /* each key's 16 hex digits and closing quote go with it */
        size_t k = 0;
        while (k < 3 && (jl - i < strlen(keys[k]) + 17 || memcmp(json + i, keys[k], strlen(keys[k])))) k++;
        if (k < 3) {
            i += strlen(keys[k]) + 17;
            continue;
        }
        out[w++] = json[i++];
    }
    memcpy(out + w, x + 24 + jl, n - 8 - 24 - jl);
    w += n - 8 - 24 - jl;
    free(x);
    *len = w;
    return out;
}

void th_same_bundle(const char *a, const char *b)
{
    size_t la, lb;
    char *x = bundle_without_source(a, &la), *y = bundle_without_source(b, &lb);
    cr_assert(la == lb && memcmp(x, y, la) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

void th_same_rows(const char *a, const char *b)
{
    char *o;
    int rc = th_run(&o, "$B/ctrbox-table export %s --to text rows_a.txt --with-optimizer --force && "
                        "$B/ctrbox-table export %s --to text rows_b.txt --with-optimizer --force && "
                        "sort rows_a.txt > rows_as.txt && sort rows_b.txt > rows_bs.txt", a, b);
    cr_assert_eq(rc, 0, "%s", o);
    free(o);
    th_same_file("rows_as.txt", "rows_bs.txt");
}
