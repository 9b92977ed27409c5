// Huge pages for the syncer's large vectors.
//
// A round of a 100M-parameter model streams a few hundred MB through vectors
// that live for the whole run. On 4 KiB pages the first touch of each page is
// a fault and every pass misses the TLB once per 4 KiB; with 2 MiB pages both
// go away (measured: the merge took half the time with glibc's hugetlb tunable
// set, which nothing sets). Debian's kernels run transparent huge pages in
// "madvise" mode: memory gets them only where madvise(MADV_HUGEPAGE) asked
// before it was first touched, so vectors that matter are reserved here.
// Everything is best effort: where the kernel says no, pages stay 4 KiB and
// nothing else changes.
#pragma once

#include <cstddef>
#include <vector>

namespace atl {

// Asks for huge pages over the whole 2 MiB pages inside [p, p + bytes).
// Nothing for ranges that hold none.
void advise_huge_pages(const void* p, size_t bytes);

// Gives v room for n elements, on memory advised for huge pages when it had to
// grow (its elements are kept). A later resize() or assign() up to n then
// faults 2 MiB at a time instead of 4 KiB.
template <class T>
void reserve_huge(std::vector<T>& v, size_t n) {
  if (v.capacity() >= n) return;
  std::vector<T> w;
  w.reserve(n);
  advise_huge_pages(w.data(), n * sizeof(T));
  w.insert(w.end(), v.begin(), v.end());
  v.swap(w);
}

}  // namespace atl
