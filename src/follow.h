/*
 * follow.h: `ctrbox train --follow DIR`: which entries of a watched folder are complete and not
 * trained yet, the ledger of those trained (kept in the model file, so that a model and the list
 * of what it learnt are saved together, atomically), and the export folder a serving process
 * polls (--export-every, --export-dir).
 *
 * An entry of DIR is a unit of training, taken in name order:
 *   a file NAME, complete when NAME.done exists, or, while DIR holds no done-file at all (and no
 *     --follow-done was given), once it is there and unchanged for a second: a writer renames it
 *     into place from a temporary name (the second guards a writer that writes its first file in
 *     place, before its first done-file shows the folder's convention; --follow-done is exact).
 *     Names beginning with '.' or '_' and temporary names (*.tmp, *.part, *.partial,
 *     *.inprogress, *.crc, *~) are never taken.
 *   a folder NAME/, complete when NAME/_SUCCESS exists (Hadoop, Spark): its files, in name order
 *     (those beginning with '.' or '_' left out), are one unit.
 */
#ifndef CTRBOX_SRC_FOLLOW_H
#define CTRBOX_SRC_FOLLOW_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "modelfile.h"

/* A new ledger for the folder dir (absolute): a jansson object {"dir": ..., "files": []}. */
void *follow_ledger_new(const char *dir);
/* Whether the ledger is dir's (a model follows one folder). */
int follow_ledger_dir_is(const void *ledger, const char *dir);
/* Add a trained unit: its name, rows, and the pass counter when it was done. */
void follow_ledger_add(void *ledger, const char *name, uint64_t rows, uint32_t pass);
/* Units in the ledger. */
size_t follow_ledger_count(const void *ledger);

/* The first complete entry of dir (name order) not in the ledger: 1 with *name (the entry's name)
 * and *path (dir/name) set (caller frees), 0 if none, <0 with err. need_done: files need a
 * done-file. *settling: files there that are not yet a second old. */
int follow_next(const char *dir, int need_done, const void *ledger, char **name, char **path, int *settling, char *err,
                size_t errlen);
/* follow_next, polled until an entry is there (1), `idle` seconds pass without one and none
 * settling (0; idle < 0: never), or *stop is set (0). <0 with err. */
int follow_wait(const char *dir, int need_done, const void *ledger, double idle, volatile sig_atomic_t *stop,
                char **name, char **path, char *err, size_t errlen);

/* --export-every N --export-dir E: if E holds no base yet, or the model (at pass `pass`) is N or
 * more passes past E's last export, write the next bundle (a base, then deltas since the last
 * export) and then E/manifest.json, both durably:
 * {"base": {"file": ..., "pass": P, "state": X}, "deltas": [{"file": ..., "since": S, "pass": P, "state": X}, ...]}
 * (X: the state of the model exported, modelfile_state_of; the next delta names it as the state it
 * goes on from).
 * A serving process polls the manifest, loads the base and applies the deltas in order.
 * The bundle is the trainer's model (its rows in memory, or in the open table folder of ps, as
 * of its last commit: passes_export). *wrote: the file written (NULL if none was due; caller
 * frees). 0, or <0 with err. */
struct passes;
int follow_export(struct passes *ps, const model_meta *meta, const char *export_dir, uint32_t pass, uint32_t every,
                  char **wrote, char *err, size_t errlen);

#endif
