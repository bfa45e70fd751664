// SPDX-License-Identifier: Apache-2.0
// errors.h: the thread-local reason behind a failed call (nk_last_error).
#ifndef NK_KERNELS_ERRORS_H_
#define NK_KERNELS_ERRORS_H_

#include "include/normkernels.h"

namespace nk {

// Records printf-style `format` as this thread's last error; returns `status`.
nk_status SetError(nk_status status, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace nk

#endif  // NK_KERNELS_ERRORS_H_
