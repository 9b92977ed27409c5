// The subcommands of `atoll`, one file each (cli/<name>_command.cc).
//
// Each adds itself to the app with its options; its callback, run by the
// parser once the command line is read, does the work and leaves the exit
// status in `status` (ExitStatus below). main (cli/atoll.cc) is the table of them.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "atoll/status.h"

namespace atl::cli {

using AddCommand = void (*)(CLI::App& app, int& status);

void add_run_command(CLI::App& app, int& status);
void add_validate_command(CLI::App& app, int& status);
void add_topology_command(CLI::App& app, int& status);
void add_chaos_command(CLI::App& app, int& status);
void add_syncer_command(CLI::App& app, int& status);
void add_learner_command(CLI::App& app, int& status);
void add_certs_command(CLI::App& app, int& status);
void add_bandwidth_command(CLI::App& app, int& status);
void add_sweep_command(CLI::App& app, int& status);
void add_simulate_command(CLI::App& app, int& status);
void add_plot_command(CLI::App& app, int& status);
void add_assemble_command(CLI::App& app, int& status);

// ---- what the commands share

// Exit statuses, also what a cluster engine acts on (README, "Running on a
// cluster"). 75 and 77 are sysexits.h's EX_TEMPFAIL and EX_NOPERM.
enum ExitStatus : int {
  kExitDone = 0,         // the run is over, or this learner left in order
  kExitFailed = 1,       // the work failed
  kExitUsage = 2,        // bad arguments or input: starting again cannot help
  kExitLost = 75,        // no syncer for --give-up seconds: start again, it may be back
  kExitRefused = 77,     // refused (token, id, model, 'full'), or no TLS handshake: starting again cannot help
  kExitInterrupted = 130,
};
// What a run that could not go on exits with: kExitRefused, kExitLost
// (Status::Code::kUnavailable), kExitDone when it was over before it began
// (Status::Code::kOver), else kExitFailed.
int exit_status_of(const Status& s);

// Prints "atoll: <why>" on stderr; returns kExitUsage.
int fail(const Status& s);
// Where run outputs go unless a flag says otherwise: atoll-out/<name>, one ignored folder.
std::string output(const char* name);
// A positive, finite number of seconds (CLI11's Range lets nan and inf through).
extern const CLI::Validator kPositiveSeconds;
extern const CLI::Range kThreads;  // compute threads: 1 to 1024

// ---- the options several subcommands take
//
// Each is declared here once, name and help together, so that it says the
// same thing in every subcommand that takes it; tests/docs/docs_check.py
// holds every subcommand's help to them and lists which subcommand takes
// which. --metrics and --metrics-public: add_metrics_flags (run_status.h);
// the network flags of syncer and learner: add_cluster_flags (cluster_flags.h).

// -q,--quiet: only the summary at the end; no start line, no progress line.
// Warnings and errors still go to stderr.
void add_quiet_flag(CLI::App* command, bool& quiet);
// -v,--verbose: log at info level (every connection, registration, restart
// and refusal), from the moment the flag is read. `verbose`, if given, is set
// too (a launcher passes -v on to its children).
void add_verbose_flag(CLI::App* command, bool* verbose = nullptr);
// --set KEY=VALUE, repeatable: overrides of the topology's keys.
void add_set_option(CLI::App* command, std::vector<std::string>& sets);
// --report PATH: where the JSON report goes; empty: none. Its help shows
// what `path` holds now as the default.
void add_report_option(CLI::App* command, std::string& path);
// --data DIR: the data folder (default: $ATOLL_DATA_DIR or ./data).
void add_data_option(CLI::App* command, std::string& dir);
// --threads N: compute threads for the learners (0: one per core).
void add_threads_option(CLI::App* command, int& threads);
// --seconds S: the run stops after S seconds, whatever its token budget.
void add_seconds_option(CLI::App* command, double& seconds);
// --sample-prompt TEXT: what a language model's sample in the report
// continues (EvaluationOptions::sample_prompt, atoll/evaluation.h).
void add_sample_prompt_option(CLI::App* command, std::string& prompt);
// --curve N: the global model evaluated at N points of each run, for the report's curve.
void add_curve_option(CLI::App* command, int& points);

}  // namespace atl::cli
