// Muon's orthogonalization (Jordan et al. 2024; Moonlight, Liu et al. 2025).
//
// Muon updates a 2-D weight by the orthogonal factor of its (Nesterov)
// momentum: for M = U S V^T it steps along U V^T, every singular direction at
// the same size. Five Newton-Schulz steps of the quintic
//   X <- a X + (b A + c A^2) X,   A = X X^T,   (a, b, c) = (3.4445, -4.7750, 2.0315)
// from X = M / ||M||_F bring every singular value into about [0.7, 1.2]
// (the coefficients trade exactness for speed, as in the reference). AdamW
// (atoll/adamw.h) applies it to the body's matrices when `muon` is set.
#pragma once

#include <span>

namespace atl {

// out = NS5(m), the approximate U V^T of the column-major rows x cols matrix
// `m` (zero for a zero matrix). In fp32; the reference runs in bf16.
// REQUIRES: m and out have rows * cols floats, rows > 0, cols > 0; they may alias.
void newton_schulz5(std::span<const float> m, int rows, int cols, std::span<float> out);

// Moonlight's scale for an orthogonalized update, 0.2 * sqrt(max(rows, cols)):
// its RMS then matches AdamW's typical 0.2 to 0.4, so one lr serves both.
float muon_scale(int rows, int cols);

}  // namespace atl
