#include "atoll/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace atl {

void advise_huge_pages(const void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = (begin + bytes) & ~(kHuge - 1);
  if (first >= last) return;
  // EINVAL where the kernel has no THP: the pages stay small, which is fine.
  (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace atl
