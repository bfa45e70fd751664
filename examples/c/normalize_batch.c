/* SPDX-License-Identifier: Apache-2.0 */
/* normalize_batch.c: the pre-norm step of a transformer block in plain C99:
   s = x + residual, y = LayerNorm(s), on a batch of token vectors, with status checks.
   Built by CMake and run by ctest (example.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <normkernels.h>

#define TOKENS 16
#define HIDDEN 768

static int check(nk_status s, const char* what) {
  if (s == NK_OK) return 0;
  fprintf(stderr, "%s failed: %s (%s)\n", what, nk_status_string(s), nk_last_error());
  return 1;
}

int main(void) {
  float* x = malloc(sizeof(float) * TOKENS * HIDDEN);
  float* residual = malloc(sizeof(float) * TOKENS * HIDDEN);
  float* y = malloc(sizeof(float) * TOKENS * HIDDEN);
  float gamma[HIDDEN], beta[HIDDEN], mean[TOKENS], rstd[TOKENS];
  size_t i, t;
  int failed = 0;
  if (!x || !residual || !y) return 1;
  for (i = 0; i < TOKENS * HIDDEN; ++i) {
    x[i] = (float)sin(0.01 * (double)i);
    residual[i] = (float)(i % 7) * 0.25f;
  }
  for (i = 0; i < HIDDEN; ++i) {
    gamma[i] = 1.0f + 0.001f * (float)i;
    beta[i] = 0.1f;
  }
  /* sum == residual: the residual stream is updated in place. */
  failed |= check(nk_add_layernorm_forward_f32(TOKENS, HIDDEN, x, residual, gamma, beta,
                                               1e-5f, residual, y, mean, rstd),
                  "nk_add_layernorm_forward_f32");
  for (t = 0; t < TOKENS && !failed; ++t) {
    double m = 0, v = 0;
    for (i = 0; i < HIDDEN; ++i) m += residual[t * HIDDEN + i];
    m /= HIDDEN;
    for (i = 0; i < HIDDEN; ++i) {
      const double d = residual[t * HIDDEN + i] - m;
      v += d * d;
    }
    v /= HIDDEN;
    if (fabs(mean[t] - m) > 1e-5 || fabs(rstd[t] - 1.0 / sqrt(v + 1e-5)) > 1e-4 * rstd[t]) {
      fprintf(stderr, "token %u: statistics off\n", (unsigned)t);
      failed = 1;
    }
  }
  /* A refused call: y overlapping x partially. */
  if (nk_layernorm_forward_f32(TOKENS, HIDDEN, x, NULL, NULL, 1e-5f, x + 1, NULL, NULL) !=
      NK_ERR_OVERLAP) {
    failed = 1;
  }
  printf("%s: %d tokens x %d on %s, token 0 mean %.4f rstd %.4f; refused: %s\n",
         failed ? "FAILED" : "ok", TOKENS, HIDDEN, nk_get_isa(), mean[0], rstd[0],
         nk_last_error());
  free(x);
  free(residual);
  free(y);
  return failed;
}
