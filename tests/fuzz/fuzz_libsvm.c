/* fuzz_libsvm.c: libFuzzer target for the libsvm parser through the stream (see fuzz_text.h). */
#define FUZZ_FORMAT FMT_LIBSVM
#define FUZZ_SCHEMA NULL
#include "fuzz_text.h"
