// atoll: the command-line front of the embedding API (atoll/run.h).
//
//   atoll run [FILE] [--set key=value]... [--report FILE.json] [--seconds N]
//   atoll validate FILE [--set key=value]...
//   atoll topology [FILE] [--set key=value]...      (prints the effective topology)
//   atoll syncer [FILE] --listen HOST:PORT           (learners join from other processes)
//   atoll learner --join HOST:PORT --id N
//   atoll chaos PLANS...                             (fault plans and their invariants)
//   atoll certs DIR                                  (a CA and certificates for TLS)
//   atoll assemble [FILE] --run-name NAME           (a sharded run's model from its checkpoints)
//   atoll bandwidth | sweep | simulate | plot
//
// Each subcommand is one file (cli/<name>_command.cc, cli/command.h); this
// is the table of them.
#include "atoll/log.h"
#include "command.h"

int main(int argc, char** argv) {
  using namespace atl::cli;
  static constexpr AddCommand kCommands[] = {
      add_run_command,   add_validate_command,  add_topology_command, add_chaos_command,
      add_syncer_command, add_learner_command,  add_certs_command,    add_bandwidth_command,
      add_sweep_command, add_simulate_command,  add_plot_command,     add_assemble_command,
  };
  CLI::App app{
      "atoll: fault-tolerant, low-bandwidth training with Decoupled DiLoCo.\n"
      "Learners train their own replicas and hand parameter fragments to a syncer;\n"
      "no learner waits for another. README.md starts, docs/ explains every part."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  app.set_version_flag("--version", "atoll " ATOLL_VERSION);
  int status = 0;
  for (AddCommand add : kCommands) add(app, status);
  atl::set_log_level(atl::LogLevel::kWarn);  // -v raises it while the command line is read
  try {
    app.parse(argc, argv);  // runs the chosen command's callback
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error with its option
    return rc == 0 ? 0 : 2;      // a bad argument exits 2, as the help says
  }
  return status;
}
