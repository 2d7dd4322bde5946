// Subcommand registry of the lithe CLI. Each cmd_*.cpp registers itself next to its code:
//
//   namespace {
//   void setup(CLI::App& sub, lithe::cli::Runner& run) {
//     auto o = std::make_shared<Options>();
//     sub.add_option("-m,--model", o->model, "...")->required();
//     run = [o] { return run_inspect(*o); };   // returns Status
//   }
//   LITHE_COMMAND(inspect, "Print the metadata and tensor table of a model file", setup);
//   }
//
// main.cpp adds every registered command as a CLI11 subcommand, so adding a command touches
// only its own file. A non-ok Status is printed as "lithe <cmd>: error: <message>" (exit 1).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "lithe/core/status.h"

namespace lithe::cli {

using Runner = std::function<Status()>;
using Setup = void (*)(CLI::App& sub, Runner& run);

struct CommandInfo {
  const char* name;
  const char* help;
  Setup setup;
};

std::vector<CommandInfo>& command_registry();

struct Registrar {
  Registrar(const char* name, const char* help, Setup setup) {
    command_registry().push_back({name, help, setup});
  }
};

}  // namespace lithe::cli

#define LITHE_COMMAND(name, help, setup_fn) \
  const ::lithe::cli::Registrar lithe_command_##name(#name, help, setup_fn)
