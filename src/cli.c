/*
 * cli.c: the input options shared by ctrbox and ctrbox-data.
 */
#include "cli.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../dense/device.h"
#include "../io/util.h"
#include "ctrbox_version.h"

const struct option cli_input_options[] = {
    { "format", required_argument, 0, CLI_OPT_FORMAT },
    { "schema", required_argument, 0, CLI_OPT_SCHEMA },
    { "field-offsets", required_argument, 0, CLI_OPT_FIELD_OFFSETS },
    { "num", required_argument, 0, CLI_OPT_NUM },
    { "max-bad-ratio", required_argument, 0, CLI_OPT_MAX_BAD_RATIO },
    { "max-line", required_argument, 0, CLI_OPT_MAX_LINE },
    { 0, 0, 0, 0 },
};

const char cli_input_usage[] =
    "input options:\n"
    "  --format F            criteo | libsvm (libfm) | libffm | csv | cbx (cbx is detected by itself)\n"
    "  --schema S            csv columns: 'name:role,I1-I13:num' with roles label|num|cat|skip;\n"
    "                        unnamed columns are categorical, the label is label/click/Label\n"
    "  --field-offsets L     libsvm: first index of each field, e.g. 0,957,5039 (else one field)\n"
    "  --num log|bucket      integer columns as log1p(max(x,0)) dense values (default) or as\n"
    "                        categorical buckets floor(ln(x)^2) for x > 2, else x\n"
    "  --max-bad-ratio R     stop when more than this share of lines is bad (default 0.001)\n"
    "  --max-line BYTES      longest accepted line (default 1048576)\n";

void cli_input_init(cli_input *c)
{
    memset(c, 0, sizeof *c);
    source_opts_default(&c->so);
}

void cli_input_free(cli_input *c)
{
    free(c->offsets);
    c->offsets = NULL;
}

void cli_input_over(const cli_input *c, source_opts *so)
{
    if (c->given & 1u << (CLI_OPT_FORMAT - CLI_OPT_BASE)) so->fmt = c->so.fmt;
    if (c->given & 1u << (CLI_OPT_SCHEMA - CLI_OPT_BASE)) so->schema_spec = c->so.schema_spec;
    if (c->given & 1u << (CLI_OPT_FIELD_OFFSETS - CLI_OPT_BASE))
        so->field_offsets = c->so.field_offsets, so->n_offsets = c->so.n_offsets;
    if (c->given & 1u << (CLI_OPT_NUM - CLI_OPT_BASE)) so->num = c->so.num;
    if (c->given & 1u << (CLI_OPT_MAX_BAD_RATIO - CLI_OPT_BASE)) so->max_bad_ratio = c->so.max_bad_ratio;
    if (c->given & 1u << (CLI_OPT_MAX_LINE - CLI_OPT_BASE)) so->max_line = c->so.max_line;
}

int cli_input_option(cli_input *c, int opt, const char *arg)
{
    char *end;
    if (opt >= CLI_OPT_BASE && opt < CLI_OPT_END) c->given |= 1u << (opt - CLI_OPT_BASE);
    switch (opt) {
    case CLI_OPT_FORMAT:
        c->so.fmt = parse_format_from_name(arg);
        if (c->so.fmt == FMT_NONE) die("--format %s: want criteo, libsvm, libffm, csv or cbx", arg);
        return 1;
    case CLI_OPT_SCHEMA:
        c->so.schema_spec = arg;
        return 1;
    case CLI_OPT_FIELD_OFFSETS: {
        free(c->offsets);
        int n = parse_u64_list(arg, &c->offsets);
        if (n < 0) die("--field-offsets %s: want a list of integers like 0,957,5039", arg);
        c->so.field_offsets = c->offsets;
        c->so.n_offsets = n;
        return 1;
    }
    case CLI_OPT_NUM:
        if (!strcmp(arg, "log")) c->so.num = NUM_LOG;
        else if (!strcmp(arg, "bucket")) c->so.num = NUM_BUCKET;
        else die("--num %s: want log or bucket", arg);
        return 1;
    case CLI_OPT_MAX_BAD_RATIO:
        c->so.max_bad_ratio = strtod(arg, &end);
        if (*end || end == arg || !(c->so.max_bad_ratio >= 0 && c->so.max_bad_ratio <= 1))   /* NaN too */
            die("--max-bad-ratio %s: want a number between 0 and 1", arg);
        return 1;
    case CLI_OPT_MAX_LINE: {
        unsigned long long v = strtoull(arg, &end, 10);
        if (*end || end == arg || v < 16 || v > (1ull << 30))
            die("--max-line %s: want bytes between 16 and 1073741824", arg);
        c->so.max_line = (size_t)v;
        return 1;
    }
    default:
        return 0;
    }
}

struct option *cli_options_with_input(const struct option *extra)
{
    size_t a = 0, b = 0;
    while (cli_input_options[a].name) a++;
    while (extra[b].name) b++;
    struct option *o = xcalloc(a + b + 1, sizeof *o);
    memcpy(o, cli_input_options, a * sizeof *o);
    memcpy(o + a, extra, b * sizeof *o);
    return o;
}

void cli_more_args(int argc, char **argv, char **list, int *n)
{
    while (optind < argc && argv[optind][0] != '-') list[(*n)++] = argv[optind++];
}

/* ---- help, option errors, version ---- */

static void print_help(const cli_cmd *c, FILE *f)
{
    fputs(c->help, f);
    if (c->input) fputs(cli_input_usage, f);
    for (const struct option *o = c->opts; o->name; o++) {   /* each option named: "--name" then not a name char */
        size_t n = strlen(o->name);
        int found = 0;
        for (int part = 0; part < 2 && !found; part++) {
            const char *t = part ? (c->input ? cli_input_usage : "") : c->help;
            for (const char *p = strstr(t, "--"); p && !found; p = strstr(p + 2, "--"))
                found = !strncmp(p + 2, o->name, n) && !(isalnum((unsigned char)p[2 + n]) || p[2 + n] == '-');
        }
        if (!found) {
            fprintf(stderr, "%s %s: the help does not name --%s\n", c->prog, c->cmd, o->name);
            CHECK(!"every option is in its command's help");
        }
    }
}

void cli_help_check(const cli_cmd *c, int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help(c, stdout);
            exit(0);
        }
}

/* Edit distance (insertions, deletions, substitutions, adjacent swaps) of a and b, both short. */
static int distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

/* The name among names nearest to word, when near enough to be a slip (else NULL). */
static const char *nearest(const char *word, const char *const *names, size_t n_names)
{
    const char *best = NULL;
    int bd = 99;
    for (size_t i = 0; i < n_names; i++) {
        int d = distance(word, names[i]);
        if (d < bd) bd = d, best = names[i];
    }
    int len = (int)strlen(word);
    return best && bd <= (len < 5 ? 1 : len < 9 ? 2 : 3) ? best : NULL;
}

static void __attribute__((noreturn)) say_and_exit(const cli_cmd *c, int status, const char *fmt, va_list ap)
{
    fprintf(stderr, "%s %s: ", c->prog, c->cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see `%s %s --help`\n", c->prog, c->cmd);
    exit(status);
}

void cli_usage_error(const cli_cmd *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_and_exit(c, 2, fmt, ap);
}

void cli_fail(const cli_cmd *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_and_exit(c, 1, fmt, ap);
}

int cli_getopt(const cli_cmd *c, int argc, char **argv)
{
    opterr = 0;
    int opt = getopt_long(argc, argv, ":", c->opts, NULL);
    if (opt != '?' && opt != ':') return opt;
    const char *arg = argv[optind - 1];
    if (opt == ':') cli_usage_error(c, "option '%s' needs a value", arg);
    char name[128];
    snprintf(name, sizeof name, "%s", arg + strspn(arg, "-"));
    char *eq = strchr(name, '=');
    if (eq) *eq = 0;
    const struct option *exact = NULL;
    size_t n = 0;
    for (const struct option *o = c->opts; o->name; o++, n++)
        if (!strcmp(o->name, name)) exact = o;
    if (exact && eq && exact->has_arg == no_argument) cli_usage_error(c, "option '--%s' takes no value", name);
    if (!strncmp(arg, "--", 2) && !exact) {
        size_t hits = 0;   /* getopt_long takes a unique prefix: more than one is ambiguous */
        for (const struct option *o = c->opts; o->name; o++) hits += !strncmp(o->name, name, strlen(name));
        if (hits > 1) cli_usage_error(c, "option '--%s' is ambiguous: give the whole name", name);
    }
    const char **names = xcalloc(n + 1, sizeof *names);
    for (size_t i = 0; i < n; i++) names[i] = c->opts[i].name;
    names[n] = "help";
    const char *near = nearest(name, names, n + 1);
    char text[160];
    snprintf(text, sizeof text, "%s", near ? near : "");
    free(names);
    if (!strncmp(arg, "--", 2) || arg[0] != '-')
        cli_usage_error(c, "unknown option '%s'%s%s%s", arg, *text ? " (did you mean '--" : "", text, *text ? "'?)" : "");
    cli_usage_error(c, "unknown option '-%c' (options are long: --name%s%s%s)", optopt ? optopt : '?',
                    *text ? "; did you mean '--" : "", text, *text ? "'?" : "");
}

void cli_unknown_command(const char *prog, const char *cmd, const char *const *cmds)
{
    size_t n = 0;
    while (cmds[n]) n++;
    const char *near = nearest(cmd, (const char *const *)cmds, n);
    fprintf(stderr, "%s: unknown command '%s'%s%s%s; see `%s --help`\n", prog, cmd, near ? " (did you mean '" : "",
            near ? near : "", near ? "'?)" : "", prog);
    exit(2);
}

void cli_progress_start(cli_progress *p, const char *what, const char *unit)
{
    *p = (cli_progress){ what, unit, now_sec(), 0, isatty(2), 0 };
    p->last = p->t0;
}

void cli_progress_tick(cli_progress *p, uint64_t done, uint64_t total)
{
    if (!p->tty) return;
    double now = now_sec();
    if (now - p->t0 < 0.5 || now - p->last < 0.5) return;
    p->last = now;
    p->shown = 1;
    char pct[32] = "";
    if (total) snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * (double)done / (double)total);
    fprintf(stderr, "\r%s: %llu %s, %.0f/s%s   ", p->what, (unsigned long long)done, p->unit,
            (double)done / (now - p->t0), pct);
}

void cli_progress_end(cli_progress *p)
{
    if (p->shown) fprintf(stderr, "\r%*s\r", 72, "");
    p->shown = 0;
}

#ifndef CTRBOX_VERSION
#define CTRBOX_VERSION "0.15.0"
#endif
#ifndef CTRBOX_COMMIT
#define CTRBOX_COMMIT "unknown"
#endif

void cli_print_version(const char *prog)
{
    char path[4096];
    printf("%s %s (git %s)\n", prog, CTRBOX_VERSION, CTRBOX_COMMIT);
    if (device_cuda_lib_path(path, sizeof path) == 0 && access(path, R_OK) == 0)
        printf("CUDA backend: built (%s; `ctrbox devices` says whether a GPU is here)\n", path);
    else
        printf("CUDA backend: not built (%s absent: nvcc was not found at build time); the dense layers run on the CPU\n",
               path);
}
