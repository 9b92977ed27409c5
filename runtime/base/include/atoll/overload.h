// Overload: lambdas joined into one visitor for std::visit, one per alternative:
//   std::visit(Overload{[](const A&) { ... }, [](const B&) { ... }}, v);
#pragma once

namespace atl {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
// Spelled out: clang 14 (the fuzz build) has no aggregate deduction.
template <class... F>
Overload(F...) -> Overload<F...>;

}  // namespace atl
