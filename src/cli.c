/*
 * cli.c: the input options shared by ctrbox and ctrbox-data.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include "../io/util.h"

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

int cli_input_option(cli_input *c, int opt, const char *arg)
{
    char *end;
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
