/*
 * cli.h: command-line pieces shared by the programs: the input options every reading command
 * takes, and the usage text for them.
 */
#ifndef CTRBOX_CLI_H
#define CTRBOX_CLI_H

#include <getopt.h>

#include "../datasets/source.h"

/* Long options for reading inputs; ids start at CLI_OPT_BASE. Terminated by a zero entry. */
enum {
    CLI_OPT_BASE = 1000,
    CLI_OPT_FORMAT = CLI_OPT_BASE,
    CLI_OPT_SCHEMA,
    CLI_OPT_FIELD_OFFSETS,
    CLI_OPT_NUM,
    CLI_OPT_MAX_BAD_RATIO,
    CLI_OPT_MAX_LINE,
    CLI_OPT_END,
};
extern const struct option cli_input_options[];
extern const char cli_input_usage[];

/* Holds what the input options set; owns the offsets array. */
typedef struct {
    source_opts so;
    uint64_t *offsets;
} cli_input;

void cli_input_init(cli_input *c);
void cli_input_free(cli_input *c);
/* Handle option id `opt` with argument arg: 1 if handled, 0 if not an input option; dies on a bad value. */
int cli_input_option(cli_input *c, int opt, const char *arg);

/* Append `extra` (terminated by a zero entry) to the input options; caller frees. */
struct option *cli_options_with_input(const struct option *extra);

#endif
