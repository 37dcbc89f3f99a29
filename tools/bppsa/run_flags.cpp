// The flags that define a run: their roles, canonical values, the record a checkpoint keeps,
// the --resume check and the model-parallel handshake (run_flags.hpp).
#include "run_flags.hpp"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "bppsa/core/error.hpp"
#include "bppsa/io/file.hpp"

namespace bppsa::cli {

FlagRole flag_role(const std::string& flag) {
  static const std::map<std::string, FlagRole> roles = {
      // Where this process writes, what it shows, how many threads it takes, how long it waits.
      {"--help", FlagRole::local},
      {"--log", FlagRole::local},
      {"--no-progress", FlagRole::local},
      {"--threads", FlagRole::local},
      {"--mp-timeout", FlagRole::local},
      {"--cache-dir", FlagRole::local},
      // The model's shape: read back from the checkpoint's tensors and metadata, and checked
      // against them when given (recurrent_train_config, cnn_train_config).
      {"--model", FlagRole::model},
      {"--arch", FlagRole::model},
      {"--hidden", FlagRole::model},
      {"--proj", FlagRole::model},
      {"--layers", FlagRole::model},
      {"--head", FlagRole::model},
      {"--loss", FlagRole::model},
      // How far this invocation goes and what else it does; how the same gradients are computed
      // (to the last bits); how a new run starts; how the model is split across ranks (the
      // pipeline's own handshake compares the split too).
      {"--epochs", FlagRole::job},
      {"--save", FlagRole::job},
      {"--resume", FlagRole::job},
      {"--init", FlagRole::job},
      {"--prune", FlagRole::job},
      {"--check", FlagRole::job},
      {"--compare-bp", FlagRole::job},
      {"--backward", FlagRole::job},
      {"--chunks", FlagRole::job},
      {"--device", FlagRole::job},
      {"--out", FlagRole::job},
      {"--model-parallel", FlagRole::job},
      {"--stages", FlagRole::job},
      {"--replicas", FlagRole::job},
      {"--micro-batches", FlagRole::job},
      {"--mp-backward", FlagRole::job},
      {"--mp-scan", FlagRole::job},
  };
  const auto it = roles.find(flag);
  return it == roles.end() ? FlagRole::run : it->second;
}

std::string shortest(double v) {
  char buf[40];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string flag_key(const std::string& flag) { return "bppsa.flag." + flag.substr(flag.find_first_not_of('-')); }

namespace {

/// Flags whose value is a path: compared as canonical paths, so "./d" and "d" agree.
bool path_flag(const std::string& flag) {
  static const std::set<std::string> paths = {"--data-dir", "--init", "--resume", "--save", "--weights", "--batch",
                                              "--out"};
  return paths.count(flag) != 0;
}

/// The option's value as this run uses it, in one spelling per value.
std::string value_of(CLI::Option* opt) {
  if (opt->get_expected_min() == 0) return opt->count() ? "true" : "false";  // a flag without a value
  std::string raw;
  if (opt->count()) {
    raw = opt->results().back();
  } else {  // the bound variable, still at its default (or what the command resolved it to)
    const std::string help_default = opt->get_default_str();
    raw = opt->capture_default_str()->get_default_str();
    opt->default_str(help_default);
  }
  const std::string type = opt->get_type_name();
  const std::string base = type.substr(0, type.find(':'));
  const char *b = raw.data(), *e = b + raw.size();
  if (base == "FLOAT") {
    char* end = nullptr;
    const double v = std::strtod(raw.c_str(), &end);
    if (!raw.empty() && end == e) return shortest(v);
  } else if (base == "INT" || base == "UINT") {
    std::int64_t i = 0;
    std::uint64_t u = 0;
    if (base == "INT" && std::from_chars(b, e, i).ptr == e && !raw.empty()) return std::to_string(i);
    if (base == "UINT" && std::from_chars(b, e, u).ptr == e && !raw.empty()) return std::to_string(u);
  } else if (path_flag(opt->get_name()) && !raw.empty()) {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::weakly_canonical(raw, ec);
    return utf8_text(ec ? raw : p.string());
  }
  return utf8_text(raw);
}

std::string shown(const std::string& value) { return value.empty() ? "(none)" : value; }

}  // namespace

std::map<std::string, std::string> run_record(CLI::App& app) {
  std::map<std::string, std::string> record;
  for (CLI::Option* opt : app.get_options())
    if (flag_role(opt->get_name()) == FlagRole::run) record[flag_key(opt->get_name())] = value_of(opt);
  return record;
}

std::string handshake_flags(CLI::App& app) {
  std::map<std::string, std::string> flags;
  for (CLI::Option* opt : app.get_options())
    if (flag_role(opt->get_name()) != FlagRole::local) flags[opt->get_name()] = value_of(opt);
  std::string s;
  for (const auto& [flag, value] : flags) s += (s.empty() ? "" : " ") + flag + "=" + value;
  return s;
}

void check_resume_flags(CLI::App& app, const TensorFile& checkpoint, const std::string& file) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string flag = opt->get_name();
    if (flag_role(flag) != FlagRole::run) continue;
    const auto saved = checkpoint.metadata.find(flag_key(flag));
    if (saved == checkpoint.metadata.end()) continue;  // a checkpoint from before this flag was recorded
    if (flag == "--seed" && !opt->count()) {  // the shuffles of the epochs to come follow it
      try {
        opt->add_result(saved->second);
        opt->run_callback();
      } catch (const CLI::Error&) {
        detail::raise<FormatError>("resume", file + ": metadata '" + saved->first + "' = '" + saved->second +
                                                 "' is not a seed (a whole number in [0, 2^64 − 1])");
      }
      std::cerr << "resume: --seed " << saved->second << " as recorded in " << file << " (give --seed to check it)\n";
      continue;
    }
    const std::string value = value_of(opt);
    if (value == saved->second) continue;
    const std::string given =
        opt->count() ? flag + " " + shown(value) : flag + " is " + shown(value) + " (its default, the flag omitted)";
    detail::raise<InvalidArgument>(
        "resume", given + " but " + file + " was trained with " + flag + " " + shown(saved->second) +
                      ": a resumed run must see the same data and arithmetic; resume with " + flag + " " +
                      (saved->second.empty() ? "\"\"" : saved->second) + ", or start a new run from these weights " +
                      "with --init " + file);
  }
}

}  // namespace bppsa::cli
