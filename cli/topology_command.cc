// `atoll topology [FILE]`: the effective topology (defaults, FILE, --set) as TOML.
#include <cstdio>
#include <memory>

#include "atoll/topology_file.h"
#include "command.h"

namespace atl::cli {

void add_topology_command(CLI::App& app, int& status) {
  struct Args {
    std::string file;
    std::vector<std::string> sets;
  };
  auto a = std::make_shared<Args>();
  auto* top = app.add_subcommand("topology", "Print the effective topology (defaults + FILE + --set) as TOML");
  top->add_option("file", a->file, "Topology file (TOML); none: the built-in default");
  add_set_option(top, a->sets);
  top->callback([a, &status] {
    auto t = load_topology(a->file, a->sets);
    if (!t.ok()) {
      status = fail(t.status());
      return;
    }
    std::fputs(to_toml(*t).c_str(), stdout);
    status = 0;
  });
}

}  // namespace atl::cli
