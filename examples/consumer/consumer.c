/* SPDX-License-Identifier: Apache-2.0 */
/* consumer.c: a strict C99 user of the installed library: normalizes a batch,
   checks the status, and shows a refused call. */
#include <math.h>
#include <stdio.h>

#include <normkernels.h>

int main(void) {
  /* README: Use from C (tests/consumers.sh checks that these lines are the README's) */
  float x[2][4] = {{1, 2, 3, 4}, {10, 10, 10, 10}}, y[2][4], mean[2], rstd[2];
  nk_status s = nk_layernorm_forward_f32(2, 4, &x[0][0], /*gamma=*/NULL, /*beta=*/NULL,
                                         1e-5f, &y[0][0], mean, rstd);
  if (s != NK_OK) fprintf(stderr, "%s\n", nk_last_error());
  /* end of README */
  if (s != NK_OK) return 1;
  printf("libnormkernels %s on %s: mean %.4f rstd %.4f y[0] %.4f y[1][0] %.4f\n",
         nk_version(), nk_get_isa(), mean[0], rstd[0], y[0][0], y[1][0]);
  if (fabsf(y[0][0] + 1.3416f) > 1e-4f || y[1][0] != 0.0f) return 1;
  s = nk_layernorm_forward_f32(2, 0, &x[0][0], NULL, NULL, 1e-5f, &y[0][0], NULL, NULL);
  if (s != NK_ERR_INVALID_SHAPE) return 1;
  printf("refused as expected: %s\n", nk_last_error());
  return 0;
}
