# SPDX-License-Identifier: Apache-2.0
# The tests and the benchmarks are optional parts: NK_BUILD_TESTS / NK_BUILD_BENCHMARKS
# are AUTO (built when this is the top-level project and what they need is found, so a
# plain build needs only the library's own dependencies), ON (what they need is
# required) or OFF.

# nk_missing(PART WHAT PACKAGE HINT): WHAT (the tests, the Python tests...) of PART
# (TESTS or BENCHMARKS) needs PACKAGE, not found. Stops the configuration when
# NK_BUILD_<PART> asked for the part; under AUTO says what is skipped and how to get it.
function(nk_missing part what package hint)
  if(NK_BUILD_${part} STREQUAL "AUTO")
    message(STATUS "Skipping ${what}: ${package} not found (${hint}; "
      "-DNK_BUILD_${part}=ON makes it required)")
  else()
    message(FATAL_ERROR "NK_BUILD_${part}=${NK_BUILD_${part}}: ${package} not found, "
      "needed by ${what} (${hint})")
  endif()
endfunction()

# nk_part(PART PACKAGE HINT): sets NK_<PART> true when the part is to be built, finding
# PACKAGE (find_package's name; HINT says how to install it).
function(nk_part part package hint)
  set(mode "${NK_BUILD_${part}}")
  if(mode STREQUAL "AUTO" AND NOT CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
    set(mode OFF)  # under add_subdirectory the user's project builds only the library
  endif()
  set(NK_${part} OFF PARENT_SCOPE)
  if(NOT mode)
    return()
  endif()
  find_package(${package} QUIET)
  if(${package}_FOUND)
    set(NK_${part} ON PARENT_SCOPE)
  else()
    string(TOLOWER "the ${part}" what)
    nk_missing(${part} "${what}" ${package} "${hint}")
  endif()
endfunction()
