// trainer.json, which a resumed run reads from its checkpoint: the step and the guards' state.
#include "fuzz_util.h"
#include "train/resume.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    const train::SavedState s = train::parse_trainer_state(fuzz::text(data, size), "trainer.json");
    if (s.step < 0 || (s.loss_scale && !(*s.loss_scale >= 1.0))) fuzz::fail("trainer.json: a checked field got through");
  } catch (const Error&) {
  }
  return 0;
}
