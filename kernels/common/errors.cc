// SPDX-License-Identifier: Apache-2.0
// errors.cc: nk_version, nk_status_string, nk_last_error and the thread-local message.
#include "kernels/common/errors.h"

#include <cstdarg>
#include <cstdio>

namespace nk {
namespace {
thread_local char t_last_error[512] = "";
}  // namespace

nk_status SetError(nk_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_last_error, sizeof(t_last_error), format, args);
  va_end(args);
  return status;
}

}  // namespace nk

extern "C" {

#define NK_STR2(x) #x
#define NK_STR(x) NK_STR2(x)
const char* nk_version(void) {
  return NK_STR(NK_VERSION_MAJOR) "." NK_STR(NK_VERSION_MINOR) "." NK_STR(
      NK_VERSION_PATCH);
}

const char* nk_status_string(nk_status s) {
  switch (s) {
    case NK_OK:
      return "NK_OK: success";
    case NK_ERR_NULL_POINTER:
      return "NK_ERR_NULL_POINTER: a required pointer is NULL";
    case NK_ERR_INVALID_SHAPE:
      return "NK_ERR_INVALID_SHAPE: a size is zero where not allowed, or overflows";
    case NK_ERR_INVALID_ARGUMENT:
      return "NK_ERR_INVALID_ARGUMENT: a scalar argument is out of its domain";
    case NK_ERR_OVERLAP:
      return "NK_ERR_OVERLAP: an output overlaps memory it may not";
    case NK_ERR_UNSUPPORTED:
      return "NK_ERR_UNSUPPORTED: not supported by this build or CPU";
    case NK_ERR_OUT_OF_MEMORY:
      return "NK_ERR_OUT_OF_MEMORY: out of memory";
    case NK_STATUS_MIN_ENUM:
    case NK_STATUS_MAX_ENUM:
      break;
  }
  return "unknown nk_status value";
}

const char* nk_last_error(void) { return nk::t_last_error; }

}  // extern "C"
