// In-process ld.lld (COMPILER.md, "Linking HSACO in-process"). lld has no C API; this is the
// whole C++ side. lld keeps global state, so one link at a time per process.
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"

LLD_HAS_DRIVER(elf)

extern "C" int kc_lld_link(const char *const *argv, int argc, char *err, size_t cap);

static std::mutex link_mutex;
static bool broken; // lld said it cannot run again in this process

extern "C" int kc_lld_link(const char *const *argv, int argc, char *err, size_t cap) {
  std::lock_guard<std::mutex> lock(link_mutex);
  if (broken) {
    std::snprintf(err, cap, "the in-process linker failed earlier and cannot run again; restart the worker");
    return -1;
  }
  std::string out_text, err_text;
  llvm::raw_string_ostream out(out_text), errs(err_text);
  std::vector<const char *> args(argv, argv + argc);
  lld::Result r = lld::lldMain(args, out, errs, {{lld::Gnu, &lld::elf::link}});
  errs.flush();
  if (!r.canRunAgain) broken = true;
  std::snprintf(err, cap, "%s", err_text.c_str());
  return r.retCode;
}
