/* fuzz_criteo.c: libFuzzer target for the criteo parser through the stream (see fuzz_text.h). */
#define FUZZ_FORMAT FMT_CRITEO
#define FUZZ_SCHEMA NULL
#include "fuzz_text.h"
