/* fuzz_libffm.c: libFuzzer target for the libffm parser through the stream (see fuzz_text.h). */
#define FUZZ_FORMAT FMT_LIBFFM
#define FUZZ_SCHEMA NULL
#include "fuzz_text.h"
