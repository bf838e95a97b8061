/*
 * commands.h: ctrbox's commands that live in their own files (main.c dispatches to them). Each
 * takes the arguments after the command name (argv[0] the program) and returns the exit status.
 */
#ifndef CTRBOX_COMMANDS_H
#define CTRBOX_COMMANDS_H

int cmd_info(int argc, char **argv);     /* info.c */
int cmd_report(int argc, char **argv);   /* report.c */

#endif
