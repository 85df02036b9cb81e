// run.json: the model, data and train sections, then the run's checks. A run.json that loads must write
// one that loads to the same run.
#include "fuzz_util.h"

#include <attend/train.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    const RunConfig run = RunConfig::from_json(fuzz::text(data, size));
    const std::string saved = run.to_json();
    std::string again;
    try {
      again = RunConfig::from_json(saved).to_json();
    } catch (const Error& e) {
      fuzz::fail(std::string("a loaded run.json wrote one it cannot read: ") + e.what());
    }
    if (again != saved) fuzz::fail("run.json does not survive a write and a read:\n" + saved + "\n" + again);
    run.validate();
  } catch (const Error&) {
  }
  return 0;
}
