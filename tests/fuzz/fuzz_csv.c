/* fuzz_csv.c: libFuzzer target for the csv parser through the stream (see fuzz_text.h). */
#define FUZZ_FORMAT FMT_CSV
#define FUZZ_SCHEMA (size & 4 ? "a:num,b:skip" : NULL)
#include "fuzz_text.h"
