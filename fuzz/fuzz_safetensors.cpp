// safetensors: the 8-byte header length, the JSON header, the data offsets; then every float tensor is
// loaded, and the file is read as an optimiser's state (what resume reads from optimizer.safetensors).
#include "fuzz_util.h"
#include "train/optimizer.h"

#include <attend/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  static fuzz::MemoryFile file("model.safetensors");
  // An AdamW state of two small parameters: "w.m", "w.v" [2, 3] and "b.m", "b.v" [3].
  static Parameter w("w", Shape{2, 3}, Role::FfnIn), b("b", Shape{3}, Role::FfnBias);
  static train::Optimizer optimizer(train::OptimizerConfig{}, std::vector<Parameter*>{&w, &b});
  file.write(fuzz::text(data, size));
  try {
    const SafetensorsReader reader(file.path());
    for (const TensorInfo& t : reader.tensors())
      if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16) (void)reader.load(t.name);
    (void)reader.metadata();
    optimizer.load_state(reader);
  } catch (const Error&) {
  }
  return 0;
}
