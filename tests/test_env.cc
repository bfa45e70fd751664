// SPDX-License-Identifier: Apache-2.0
// test_env.cc: NK_ISA, NK_NUM_THREADS and NK_STREAM_BYTES, read once at first use, and
// what the library says on stderr about values it ignores. Usage: test_env <expected ISA
// or "best"> <expected threads or "default"> <LINES> [WORDS...]: stderr must hold LINES
// lines (one per ignored variable), each starting "normkernels: ", and every one of
// WORDS. An expected ISA of AVX3 on a CPU without AVX-512 (by libgcc's cpuid) expects
// the name known but not run: the best ISA, and one line saying this CPU lacks it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_features.h"
#include "normkernels.h"

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  // stderr into a file, read back after the library's first use.
  FILE* err = tmpfile();
  if (err == NULL || dup2(fileno(err), STDERR_FILENO) < 0) return 2;
  const char* best = NULL;
  nk_list_isas(&best, 1);
  const char* want_isa = strcmp(argv[1], "best") == 0 ? best : argv[1];
  int want_lines = atoi(argv[3]);
  const char* lacks = NULL;
#if defined(__x86_64__)
  if (strcmp(argv[1], "AVX3") == 0 && !CpuRunsAvx3()) {
    want_isa = best;
    want_lines = 1;
    lacks = "this CPU does not support";
  }
#endif
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
  fflush(stderr);
  char text[4096] = "";
  rewind(err);
  const size_t len = fread(text, 1, sizeof(text) - 1, err);
  text[len] = '\0';
  printf("stderr: %s", len ? text : "(empty)\n");
  for (int i = 4; i < argc; ++i) {
    if (strstr(text, argv[i]) == NULL) {
      printf("stderr lacks \"%s\"\n", argv[i]);
      ++failures;
    }
  }
  if (lacks != NULL && strstr(text, lacks) == NULL) {
    printf("stderr lacks \"%s\"\n", lacks);
    ++failures;
  }
  int lines = 0;
  for (const char* line = text; *line; ++lines) {
    if (strncmp(line, "normkernels: ", 13) != 0) {
      printf("a line of stderr does not start \"normkernels: \"\n");
      ++failures;
    }
    const char* end = strchr(line, '\n');
    line = end ? end + 1 : line + strlen(line);
  }
  if (lines != want_lines) {
    printf("%d lines on stderr, expected %d\n", lines, want_lines);
    ++failures;
  }
  printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
  return failures ? 1 : 0;
}
