// SPDX-License-Identifier: Apache-2.0
// c_types.h: the C ABI's tensor pointers as the kernels' element types. nk_bf16 and
// nk_f16 are uint16_t bit patterns, the bits of hwy::bfloat16_t and hwy::float16_t;
// float is float.
#ifndef NK_KERNELS_C_TYPES_H_
#define NK_KERNELS_C_TYPES_H_

namespace nk {

template <class T, class C>
const T* As(const C* p) {
  return reinterpret_cast<const T*>(p);
}
template <class T, class C>
T* As(C* p) {
  return reinterpret_cast<T*>(p);
}

}  // namespace nk

#endif  // NK_KERNELS_C_TYPES_H_
