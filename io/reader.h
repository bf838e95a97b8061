/*
 * reader.h: sequential file reader on io_uring.
 *
 * Keeps `depth` reads of `chunk` bytes in flight on one file and hands the chunks back in file
 * order. Buffers are 4096-aligned, offsets are multiples of `chunk`, so the same reader works with
 * O_DIRECT (IO_READER_DIRECT), which it falls back from where the file system refuses it.
 * Files that are not regular (pipes) are read with plain read().
 * The reader owns its buffers; a chunk returned by io_reader_next is borrowed until the next call.
 */
#ifndef CTRBOX_IO_READER_H
#define CTRBOX_IO_READER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    IO_READER_DIRECT = 1,   /* try O_DIRECT */
};

typedef struct io_reader io_reader;

/* 0 or -errno. chunk is rounded up to 4096; depth >= 1. */
int io_reader_open(io_reader **out, const char *path, int flags, size_t chunk, int depth);
/* Bytes in the next chunk (> 0), 0 at end of file, or -errno (-ENODATA: the file got shorter than it
 * was when opened). *data is borrowed until the next call. */
ssize_t io_reader_next(io_reader *r, const uint8_t **data);
/* Whether O_DIRECT is in use. */
int io_reader_is_direct(const io_reader *r);
uint64_t io_reader_size(const io_reader *r);
void io_reader_close(io_reader *r);

#endif
