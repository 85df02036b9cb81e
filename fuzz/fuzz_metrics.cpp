// metrics.jsonl, which a resumed run keeps up to its checkpoint's step (the first 8 bytes of the input, as
// a little-endian integer, are that step). What is kept must be whole lines of the input.
#include "fuzz_util.h"
#include "train/resume.h"

#include <attend/log.h>

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  static const bool quiet = (log::set_level(log::Level::Error), true);  // a cut-short last line is a warning
  (void)quiet;
  int64_t step = 0;
  if (size >= 8) {
    std::memcpy(&step, data, 8);
    data += 8, size -= 8;
  }
  const std::string_view text = fuzz::text(data, size);
  try {
    const std::string kept = train::metrics_up_to(text, "metrics.jsonl", step);
    // Every kept line is a line of the input.
    for (size_t pos = 0; pos < kept.size();) {
      const size_t end = kept.find('\n', pos);
      if (end == std::string::npos) fuzz::fail("metrics.jsonl: the kept text does not end with a newline");
      if (text.find(std::string_view(kept).substr(pos, end - pos)) == std::string_view::npos)
        fuzz::fail("metrics.jsonl: a kept line is not in the input");
      pos = end + 1;
    }
  } catch (const Error&) {
  }
  return 0;
}
