// lithe: one binary, one subcommand per job. See command.h for how subcommands register.
#include <algorithm>
#include <cstdio>
#include <map>

#include "command.h"
#include "lithe/core/log.h"
#include "lithe/core/thread_pool.h"

namespace lithe::cli {

std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> commands;
  return commands;
}

}  // namespace lithe::cli

int main(int argc, char** argv) {
  using namespace lithe;
  CLI::App app{"lithe: compress large language models after training and run them fast"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--threads, --log) may also follow the subcommand
  app.set_version_flag("--version", "lithe 0.1.0");
  std::string log_level;
  int threads = 0;
  app.add_option("--log", log_level, "log level: debug, info, warn, error, off")->check(
      CLI::IsMember({"debug", "info", "warn", "error", "off"}));
  app.add_option("-t,--threads", threads, "worker threads (default: all hardware threads, or LITHE_THREADS)");

  auto& registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const cli::CommandInfo& a, const cli::CommandInfo& b) { return std::string_view(a.name) < b.name; });
  std::map<CLI::App*, cli::Runner> runners;
  for (const auto& c : registry) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    c.setup(*sub, runners[sub]);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!log_level.empty()) {
    LogLevel l{};
    parse_log_level(log_level, &l);
    set_log_level(l);
  }
  if (threads > 0) set_num_threads(threads);

  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    Status st = run ? run() : error(StatusCode::internal, "command '{}' has no runner", sub->get_name());
    if (!st.is_ok()) {
      std::fprintf(stderr, "lithe %s: error: %s\n", sub->get_name().c_str(), st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
