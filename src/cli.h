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
    unsigned given;               /* bit (opt - CLI_OPT_BASE) set for each input option given */
} cli_input;

/* so with the options c was given put over it (a model's input settings, the user's changes). */
void cli_input_over(const cli_input *c, source_opts *so);

void cli_input_init(cli_input *c);
void cli_input_free(cli_input *c);
/* Handle option id `opt` with argument arg: 1 if handled, 0 if not an input option; dies on a bad value. */
int cli_input_option(cli_input *c, int opt, const char *arg);

/* Append `extra` (terminated by a zero entry) to the input options; caller frees. */
struct option *cli_options_with_input(const struct option *extra);

/* The FILE arguments after an option that takes several (--train a b c): up to the next option. */
void cli_more_args(int argc, char **argv, char **list, int *n);

/* One command of a program, for its help and its option errors. */
typedef struct {
    const char *prog;              /* "ctrbox" */
    const char *cmd;               /* "train" */
    const char *help;              /* its usage and every option with its default */
    const struct option *opts;     /* its options (getopt_long's table) */
    int input;                     /* it takes the input options: their help follows */
} cli_cmd;

/* --help or -h among argv (before a "--"): print c's help on stdout and exit 0. Every option of
 * c->opts must be named in the help (a programmer error otherwise: the tests ask every command). */
void cli_help_check(const cli_cmd *c, int argc, char **argv);
/* getopt_long over c->opts, quiet: an unknown option ("did you mean" the nearest when it is
 * close), a missing or unexpected argument is one line naming it and "see `PROG CMD --help`",
 * then exit 2. */
int cli_getopt(const cli_cmd *c, int argc, char **argv);
/* An option that does not parse: "PROG CMD: message; see `PROG CMD --help`", exit 2. */
void cli_usage_error(const cli_cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* The same line for arguments that parse but do not go together (a required one missing, a wrong
 * count of operands, a bad value): exit 1, as every refusal. */
void cli_fail(const cli_cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* An unknown command: one line with the nearest command when close, exit 2. cmds: NULL-terminated. */
void cli_unknown_command(const char *prog, const char *cmd, const char *const *cmds) __attribute__((noreturn));
/* The progress of a long tool run, on a terminal only (stderr a tty): "\rWHAT: N rows, R/s (P%)"
 * from 0.5 s on, twice a second; nothing in a pipe or a file. */
typedef struct {
    const char *what, *unit;
    double t0, last;
    int tty, shown;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what, const char *unit);
/* done so far, of total (0: unknown). */
void cli_progress_tick(cli_progress *p, uint64_t done, uint64_t total);
/* Clear the line, if one was shown. */
void cli_progress_end(cli_progress *p);

/* `PROG --version`: the version, the git commit built, and whether the CUDA backend was built. */
void cli_print_version(const char *prog);

#endif
