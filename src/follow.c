/*
 * follow.c: the watched folder's complete entries, the ledger of those trained, the export
 * folder's manifest (follow.h).
 */
#define _GNU_SOURCE
#include "follow.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../io/util.h"
#include "passes.h"

void *follow_ledger_new(const char *dir)
{
    json_t *l = json_object();
    json_object_set_new(l, "dir", json_string(dir));
    json_object_set_new(l, "files", json_array());
    return l;
}

int follow_ledger_dir_is(const void *ledger, const char *dir)
{
    const char *d = json_string_value(json_object_get((const json_t *)ledger, "dir"));
    return d && !strcmp(d, dir);
}

void follow_ledger_add(void *ledger, const char *name, uint64_t rows, uint32_t pass)
{
    json_t *e = json_object();
    json_object_set_new(e, "name", json_string(name));
    json_object_set_new(e, "rows", json_integer((json_int_t)rows));
    json_object_set_new(e, "pass", json_integer((json_int_t)pass));
    json_array_append_new(json_object_get((json_t *)ledger, "files"), e);
}

size_t follow_ledger_count(const void *ledger) { return json_array_size(json_object_get((const json_t *)ledger, "files")); }

enum { FOLLOW_SETTLE = 1 };   /* seconds */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* A name a writer uses while the file is not complete, or one that is not data. */
static int skipped_name(const char *n)
{
    static const char *temp[] = { ".tmp", ".part", ".partial", ".inprogress", ".crc", "~", ".done" };
    if (n[0] == '.' || n[0] == '_') return 1;
    for (size_t i = 0; i < sizeof temp / sizeof *temp; i++)
        if (ends_with(n, temp[i])) return 1;
    return 0;
}

static int exists_in(const char *dir, const char *name, const char *suffix)
{
    char *p;
    struct stat st;
    if (asprintf(&p, "%s/%s%s", dir, name, suffix) < 0) die("out of memory");
    int yes = stat(p, &st) == 0;
    free(p);
    return yes;
}

int follow_next(const char *dir, int need_done, const void *ledger, char **name, char **path, int *settling, char *err,
                size_t errlen)
{
    *name = *path = NULL;
    *settling = 0;
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        snprintf(err, errlen, "--follow %s: %s", dir, strerror(e));
        return -e;
    }
    size_t n = 0, cap = 64;
    char **v = xmalloc(cap * sizeof *v);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (ends_with(de->d_name, ".done")) need_done = 1;   /* the writer marks its files */
        if (skipped_name(de->d_name)) continue;
        if (n == cap) v = xrealloc(v, (cap *= 2) * sizeof *v);
        v[n++] = xstrdup(de->d_name);
    }
    closedir(d);
    qsort(v, n, sizeof *v, cmp_str);
    /* the trained names, sorted, to look each entry up */
    const json_t *files = json_object_get((const json_t *)ledger, "files");
    size_t nt = json_array_size(files);
    const char **trained = xmalloc((nt ? nt : 1) * sizeof *trained);
    for (size_t i = 0; i < nt; i++) trained[i] = json_string_value(json_object_get(json_array_get(files, i), "name"));
    qsort(trained, nt, sizeof *trained, cmp_str);
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        if (bsearch(&v[i], trained, nt, sizeof *trained, cmp_str)) continue;
        char p[8192];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, v[i]);
        if (stat(p, &st) < 0) continue;   /* gone since */
        /* a file without a done-file: renamed into place, so complete; but one written in place by
         * a writer that marks its files from the second on looks the same, and is taken only
         * once it has not changed for FOLLOW_SETTLE seconds */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        double age = (double)(now.tv_sec - st.st_mtim.tv_sec) + (double)(now.tv_nsec - st.st_mtim.tv_nsec) * 1e-9;
        int ready = S_ISDIR(st.st_mode) ? exists_in(p, "", "_SUCCESS") || exists_in(dir, v[i], ".done")
                  : S_ISREG(st.st_mode) ? exists_in(dir, v[i], ".done") || (!need_done && age >= FOLLOW_SETTLE) : 0;
        if (!ready && S_ISREG(st.st_mode) && !need_done && !exists_in(dir, v[i], ".done")) (*settling)++;
        if (!ready) continue;
        *name = xstrdup(v[i]);
        *path = xstrdup(p);
        found = 1;
    }
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    free(trained);
    return found;
}

int follow_wait(const char *dir, int need_done, const void *ledger, double idle, volatile sig_atomic_t *stop,
                char **name, char **path, char *err, size_t errlen)
{
    double t0 = now_sec();
    for (;;) {
        int settling;
        int r = follow_next(dir, need_done, ledger, name, path, &settling, err, errlen);
        if (r != 0 || *stop) return r < 0 ? r : r && !*stop;
        if (idle >= 0 && now_sec() - t0 >= idle && !settling) return 0;
        struct timespec ts = { 0, 200 * 1000 * 1000 };   /* a signal ends the sleep early */
        nanosleep(&ts, NULL);
    }
}

/* ---- the export folder ---- */

static int manifest_write(const char *export_dir, json_t *man, char *err, size_t errlen)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/manifest.json", export_dir);
    char *s = json_dumps(man, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    durable_file f;
    int ret = durable_open(&f, p);
    if (ret == 0) {
        fputs(s, f.f);
        fputc('\n', f.f);
        ret = durable_commit(&f);
    }
    if (ret < 0) snprintf(err, errlen, "%s: cannot write: %s", p, strerror(-ret));
    free(s);
    return ret;
}

/* E/manifest.json, or a new one ({"base": null, "deltas": []}); the pass of the last export in *last,
 * the state of its model in *last_state (0: not recorded, a manifest of an earlier build). */
static json_t *manifest_read(const char *export_dir, uint32_t *last, uint64_t *last_state, int *have_base, char *err,
                             size_t errlen)
{
    *last_state = 0;
    char p[8192];
    snprintf(p, sizeof p, "%s/manifest.json", export_dir);
    *have_base = 0;
    *last = 0;
    if (access(p, F_OK) < 0) {
        json_t *m = json_object();
        json_object_set_new(m, "base", json_null());
        json_object_set_new(m, "deltas", json_array());
        return m;
    }
    json_error_t je;
    json_t *m = json_load_file(p, 0, &je);
    json_t *base = m ? json_object_get(m, "base") : NULL, *deltas = m ? json_object_get(m, "deltas") : NULL;
    if (!m || !json_is_object(m) || !json_is_array(deltas) || (!json_is_null(base) && !json_is_object(base))) {
        snprintf(err, errlen, "%s: not a ctrbox export manifest%s%s (line %d)", p, m ? "" : ": ", m ? "" : je.text, je.line);
        if (m) json_decref(m);
        return NULL;
    }
    *have_base = json_is_object(base);
    json_t *lastj = json_array_size(deltas) ? json_array_get(deltas, json_array_size(deltas) - 1) : base;
    if (*have_base) *last = (uint32_t)json_integer_value(json_object_get(lastj, "pass"));
    /* none, or not a state: the next delta is not checked, as before states were recorded */
    if (*have_base) modelfile_state_parse(json_string_value(json_object_get(lastj, "state")), last_state);
    return m;
}

int follow_export(passes *ps, const model_meta *meta, const char *export_dir, uint32_t pass, uint32_t every,
                  char **wrote, char *err, size_t errlen)
{
    *wrote = NULL;
    if (mkdir(export_dir, 0755) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "--export-dir %s: cannot create: %s", export_dir, strerror(e));
        return -e;
    }
    uint32_t last;
    uint64_t last_state, state;
    int have_base;
    json_t *man = manifest_read(export_dir, &last, &last_state, &have_base, err, errlen);
    if (!man) return -EBADMSG;
    if (have_base && (pass <= last || pass - last < every)) {
        json_decref(man);
        return 0;
    }
    char name[64], path[8192];
    if (have_base) snprintf(name, sizeof name, "delta-%010u-%010u.bundle", last, pass);
    else snprintf(name, sizeof name, "base-%010u.bundle", pass);
    snprintf(path, sizeof path, "%s/%s", export_dir, name);
    int ret = passes_export(ps, meta, path, have_base ? (int64_t)last : -1, last_state, &state, err, errlen);
    if (ret == 0) {
        json_t *e = json_object();
        char hex[17];
        modelfile_state_text(state, hex);
        json_object_set_new(e, "file", json_string(name));
        if (have_base) json_object_set_new(e, "since", json_integer(last));
        json_object_set_new(e, "pass", json_integer(pass));
        json_object_set_new(e, "state", json_string(hex));   /* the next delta goes on from it */
        if (have_base) json_array_append_new(json_object_get(man, "deltas"), e);
        else json_object_set_new(man, "base", e);
        ret = manifest_write(export_dir, man, err, errlen);
    }
    json_decref(man);
    if (ret == 0) *wrote = xstrdup(path);
    return ret;
}
