/*
 * stream.h: the bytes of one input (a file or a memory buffer), decompressed, as lines or bytes.
 *
 * Compression is detected from the first bytes (gzip 1f 8b, zstd 28 b5 2f fd), never from the
 * name. Files are read through io_reader (io_uring). Lines end at '\n'; a '\r' before it is
 * dropped, so CRLF files read like LF files. A line longer than max_line is returned with
 * `overlong` set and its bytes dropped, so one bad line cannot exhaust memory.
 * Pointers handed out (line bytes, error text) are borrowed until the next call.
 */
#ifndef CTRBOX_IO_STREAM_H
#define CTRBOX_IO_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { IO_COMP_NONE, IO_COMP_GZIP, IO_COMP_ZSTD } io_comp;

typedef struct {
    const char *ptr;      /* line bytes, without '\n' or "\r\n" */
    size_t len;
    uint64_t lineno;      /* 1-based */
    int overlong;         /* the line exceeded max_line; ptr/len hold nothing useful */
} io_line;

typedef struct io_stream io_stream;

enum { IO_STREAM_DIRECT = 1 };

/* 0 or -errno; on failure io_stream_error-style text is written to err. */
int io_stream_open(io_stream **out, const char *path, int flags, char *err, size_t errlen);
/* A stream over memory the caller keeps alive until close. */
int io_stream_open_mem(io_stream **out, const void *data, size_t len, const char *name);
/* The same over bytes taken as they are, never decompressed (a piece of a file cut at any byte). */
int io_stream_open_mem_plain(io_stream **out, const void *data, size_t len, const char *name);
/* The stream's bytes start inside a file (a piece cut after its first byte): its first line keeps
 * what looks like a byte-order mark (one before a file's first line is dropped). */
void io_stream_mid_file(io_stream *s);
void io_stream_close(io_stream *s);
/* The compression the first n bytes of a file say (its magic). */
io_comp io_bytes_compression(const void *data, size_t n);

void io_stream_set_max_line(io_stream *s, size_t max_line);
/* 1: a line; 0: end of input; <0: error (see io_stream_error). */
int io_stream_next_line(io_stream *s, io_line *line);
/* Copy up to n bytes; returns bytes copied (< n only at end of input) or <0 on error. */
ssize_t io_stream_read(io_stream *s, void *dst, size_t n);
/* Decompressed bytes consumed so far (lines and reads). */
uint64_t io_stream_offset(const io_stream *s);
/* Whether end of input has been reached with nothing left to hand out. */
int io_stream_eof(io_stream *s);

const char *io_stream_name(const io_stream *s);
const char *io_stream_error(const io_stream *s);
io_comp io_stream_compression(const io_stream *s);
int io_stream_is_direct(const io_stream *s);

/* The file an input argument names: "-" is standard input (/dev/stdin), any other the path itself. */
const char *io_input_path(const char *arg);

/* Whether out, an existing regular file, is one of the inputs (folders stand for their files, as
 * io_expand_paths reads them): 1 with that input's name in which, else 0. An output written over
 * its input (convert --out the log it reads, predict --out its data) replaced the data. */
int io_output_is_input(const char *out, char *const *inputs, int n, char *which, size_t len);
/* Whether out, a file to write (new or not), lies in a folder given among the inputs, under a name
 * that folder's listing takes (io_expand_paths): 1 with that folder in which, else 0. The next read
 * of the folder would take the output as data: split's parts doubled the rows, without a word. */
int io_output_in_input_folder(const char *out, char *const *inputs, int n, char *which, size_t len);

/* Expand paths ("-": io_input_path): a folder becomes its regular files (not starting with '.' or '_', as Hadoop and Spark
 * mark what is not data: _SUCCESS, _logs), sorted by name.
 * Returns the count and a malloc'd array of malloc'd strings, or -errno (err says which path). */
int io_expand_paths(char *const *paths, int n, char ***out, char *err, size_t errlen);
void io_free_paths(char **paths, int n);

/* The identity of a file's contents, not its name: XXH64 of its size, its first and last 64 KiB
 * and 14 blocks of 4 KiB spread between (a cut, grown or rewritten file differs; the same bytes
 * under another name do not). 0, or -errno with err. */
int io_file_digest(const char *path, uint64_t *out, char *err, size_t errlen);
/* The identity of a list of training paths' contents: XXH64 over their count and the
 * io_file_digest of each file they expand to (io_expand_paths), in order. 0, or -errno with err. */
int io_files_digest(char *const *paths, int n, uint64_t *out, char *err, size_t errlen);

#endif
