// model.safetensors.index.json (Hugging Face's sharded checkpoints): the weight map from tensor names to
// shard files. A map that parses names only plain files of the checkpoint's directory.
#include "fuzz_util.h"
#include "formats/hf_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  try {
    for (const auto& [name, file] : formats::parse_shard_index(fuzz::text(data, size), "index.json"))
      if (file.empty() || file.find('/') != std::string::npos || file == "..") fuzz::fail("a shard outside the directory: " + file);
  } catch (const Error&) {
  }
  return 0;
}
