// SPDX-License-Identifier: Apache-2.0
// test_env.cc: NK_ISA and NK_NUM_THREADS, read once at first use.
// Usage: test_env <expected ISA or "best"> <expected threads or "default">.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normkernels.h"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const char* best = NULL;
  nk_list_isas(&best, 1);
  const char* want_isa = strcmp(argv[1], "best") == 0 ? best : argv[1];
  const int want_threads = strcmp(argv[2], "default") == 0 ? -1 : atoi(argv[2]);
  int failures = 0;
  if (strcmp(nk_get_isa(), want_isa) != 0) {
    printf("ISA %s, expected %s\n", nk_get_isa(), want_isa);
    ++failures;
  }
  if (want_threads > 0 && nk_get_num_threads() != want_threads) {
    printf("threads %d, expected %d\n", nk_get_num_threads(), want_threads);
    ++failures;
  }
  if (want_threads < 0 && nk_get_num_threads() < 1) ++failures;
  printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
  return failures ? 1 : 0;
}
