// Floats in TOML and JSON text that people read.
//
// toml++ 3.3 prints a double with 17 significant digits (0.003 as
// 0.0030000000000000001). shortest_floats() rewrites each float outside a
// string as the shortest decimal that reads back to the same double
// (std::to_chars), so the text parses to exactly what it did before:
// "lr = 0.0030000000000000001" becomes "lr = 0.003", 1.1499999999999999
// becomes 1.15, and 60.0 stays 60.0 (still a float). Integers, strings (either quote),
// comments and words (nan, inf, keys such as "layer1.5") are left as they are.
// Dates and times are not understood (12:30:00.50 would lose a digit): atoll
// writes none.
#pragma once

#include <string>

namespace atl {

std::string shortest_floats(const std::string& text);

}  // namespace atl
