/*
 * helpers.h: shared test helpers: a temporary folder per test, files, running the programs.
 * Criterion runs each test in its own process, so the folder and its cleanup are per test.
 */
#ifndef CTRBOX_TESTS_HELPERS_H
#define CTRBOX_TESTS_HELPERS_H

#include <stddef.h>
#include <stdint.h>

/* Create a fresh temporary folder and return its path (static storage). */
const char *th_tmpdir(void);
/* Remove the folder made by th_tmpdir, if any. */
void th_cleanup(void);
/* "<tmpdir>/<name>" in a static ring of buffers. */
const char *th_path(const char *name);
void th_write(const char *path, const void *data, size_t len);
void th_write_str(const char *path, const char *s);
/* Read a whole file; caller frees. */
char *th_read(const char *path, size_t *len);
/* Run a shell command with the programs' folder in $B; returns the exit status, output in *out
 * (stdout and stderr together; caller frees) when out is not NULL. */
int th_run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The real data folder, or NULL when ../shared/data is absent. */
const char *th_shared_data(void);
int th_file_exists(const char *path);
/* Assert that files a and b of the temporary folder are non-empty and equal, byte for byte. */
void th_same_file(const char *a, const char *b);
/* Two serving bundles hold the same model byte for byte, but for the "source_table_id" a tiered
 * model's bundle names and the model states, which for a tiered model hash its folder's id (and so
 * the JSON's length and the checksum). */
void th_same_bundle(const char *a, const char *b);
/* Assert that table folders (or model folders) a and b hold the same rows, optimizer state
 * included, whatever their order. */
void th_same_rows(const char *a, const char *b);
/* gzip / zstd compress a buffer into a file. */
void th_write_gzip(const char *path, const void *data, size_t len);
void th_write_zstd(const char *path, const void *data, size_t len);

#endif
