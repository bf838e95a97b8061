/*
 * devrows.h: the pass tier in device memory (AIBox's third tier: SSD -> CPU memory -> GPU memory).
 *
 * When the embedding layer (or the wide part) runs on a device, the rows the batches train live
 * there while they train: each row's trainable values and optimizer state (a table record without
 * its header) in one slab of device memory, `stride` floats a row. The key -> slot map stays on the
 * host, so only slot offsets go with each batch; gathering the batch's rows out of the slab, pooling,
 * their backward and the sparse optimizer step run on the device (dense_rows_gather /
 * dense_rows_update and the layers). The counters (show, click, last pass) stay in the tables' row
 * headers on the host, where the batch's gather counts them and admission decides.
 *
 * Rows changed on the device are its newest copy until dev_rows_sync writes them back into their
 * tables (at a pass's end, before the commit; before the model predicts or is saved); they stay
 * resident, clean, for the next pass, so a key shared by two passes is uploaded once. Nothing on the
 * host may read a dirty row's values meanwhile, or change a resident row's values at all: whoever
 * changes rows on the host (shrink, a load) calls dev_rows_drop first.
 *
 * Budget: the slab holds at most budget / (stride * 4) rows. A batch's missing rows are uploaded
 * into the next free slots (one copy); when they do not fit, the changed rows are synced and the
 * tier starts empty again with this batch's rows, so a pass larger than the budget trains in
 * pieces, cut at batch boundaries, with the same result; the cut points depend only on the data
 * and the budget. A batch whose own rows exceed the budget is refused.
 *
 * Ahead of a pass (AIBox's overlap): dev_rows_prefetch sends the rows of the keys a pass will train
 * that are in their tables now into free slots without waiting; on a GPU the copy runs beside the
 * kernels of the pass training meanwhile, and the first batch that reads one of those slots waits
 * for it. Their values cannot change before then: only training changes values, and it changes
 * them here (a key the pass in training also trains reads the same, resident, row).
 *
 * The tier borrows the tables and the backend; it owns its slab and host buffers.
 */
#ifndef CTRBOX_DENSE_DEVROWS_H
#define CTRBOX_DENSE_DEVROWS_H

#include <stddef.h>
#include <stdint.h>

#include "../embedding/batch.h"
#include "../embedding/table.h"
#include "backend.h"

typedef struct dev_rows dev_rows;

typedef struct {
    uint64_t uploaded, downloaded;          /* rows copied in and out (uploaded: those sent ahead too) */
    uint64_t upload_bytes, download_bytes;
    uint64_t prefetched, prefetch_bytes;    /* of those uploaded, the ones dev_rows_prefetch sent ahead */
    uint64_t flushes;                       /* times the tier was emptied to make room (pieces beyond the first) */
    double upload_s, download_s;            /* time in the copies waited for (uploads a batch needs, downloads) */
    double prefetch_wait_s;                 /* time waiting for copies sent ahead */
    double stage_s;                         /* time packing rows for uploads and unpacking downloads on the host */
} dev_rows_stats;

/* A tier for rows of tabs (n_tables, borrowed) on backend be, within budget bytes of device memory. */
dev_rows *dev_rows_create(const dense_backend *be, emb_table *const *tabs, int n_tables, uint64_t budget);
void dev_rows_destroy(dev_rows *d);

/* Floats per row in the slab, and the most rows the budget holds. */
size_t dev_rows_stride(const dev_rows *d);
size_t dev_rows_capacity(const dev_rows *d);

/* The slots of the batch eb's unique rows (emb_batch_unique_row): rec (U, host) receives each row's
 * offset in floats into the slab; rows not resident are uploaded first. train: the step will change
 * them (they are dirty after). 0, or -1 when the batch's rows alone exceed the budget (err says so). */
int dev_rows_batch(dev_rows *d, const emb_batch *eb, size_t *rec, int train, char *err, size_t errlen);
/* Send ahead the rows of keys (per table: a pass's distinct keys) that are in their tables and not
 * resident, as many as the free slots hold, without waiting for the copy (see above). */
void dev_rows_prefetch(dev_rows *d, const key_vec *keys);
/* The slab (device memory), valid until the next dev_rows_batch. */
float *dev_rows_slab(dev_rows *d);

/* Write the rows changed on the device back into their tables; they stay resident, clean. */
void dev_rows_sync(dev_rows *d);
/* Sync, then forget every row: the host is about to change rows' values. */
void dev_rows_drop(dev_rows *d);
/* Rows resident now, and of those the ones changed since the last sync. */
size_t dev_rows_resident(const dev_rows *d);
size_t dev_rows_dirty(const dev_rows *d);
const dev_rows_stats *dev_rows_stats_of(const dev_rows *d);

#endif
