// GGUF: the header, every metadata value (arrays of arrays included), the tensor infos and their placement;
// then every value is walked, every getter tried on every key, and the first and last byte of every tensor
// read through the mapping (ASan sees a tensor the checks let past the end of the file). Then what Attend makes
// of the metadata: the model configuration (config_from_gguf) and the tokenizer (tokenizer.ggml.*: a gpt2-kind
// BPE rebuilt as a tokenizer.json, a llama-kind vocabulary as a SentencePiece ModelProto), which encodes a text.
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "fuzz_util.h"

namespace {

using namespace attend;

// Touches every element, so a value whose size the reader got wrong shows up as a sanitizer report.
size_t walk(const gguf::Value& v) {
  size_t n = v.s.size() + static_cast<size_t>(v.b) + static_cast<size_t>(v.u) + static_cast<size_t>(v.i);
  for (const gguf::Value& e : v.array) {
    if (e.type != v.element_type) fuzz::fail("an array element's type is not the array's element type");
    n += walk(e);
  }
  return n;
}

template <typename F>
void try_get(F&& get) {
  try {
    (void)get();
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemoryFile file("model.gguf");
  file.write(fuzz::text(data, size));
  try {
    const gguf::Reader reader(file.path());
    volatile size_t sum = 0;
    for (const auto& [key, value] : reader.metadata()) {
      if (reader.find(key) != &value) fuzz::fail("find() does not give the key's own value");
      sum = sum + walk(value);
      try_get([&] { return reader.get_string(key); });
      try_get([&] { return reader.get_uint(key); });
      try_get([&] { return reader.get_int(key); });
      try_get([&] { return reader.get_float(key); });
      try_get([&] { return reader.get_bool(key); });
      try_get([&] { return reader.get_strings(key); });
      try_get([&] { return reader.get_floats(key); });
      try_get([&] { return reader.get_ints(key); });
    }
    if (reader.alignment() == 0 || (reader.alignment() & (reader.alignment() - 1)) != 0)
      fuzz::fail("an alignment that is not a power of two was accepted");
    for (const gguf::TensorInfo& t : reader.tensors()) {
      if (reader.tensor(t.name) != &t) fuzz::fail("tensor() does not give the tensor's own info");
      if (t.bytes == 0 || t.offset % reader.alignment() != 0) fuzz::fail("an empty or unaligned tensor was accepted");
      sum = sum + t.data[0] + t.data[t.bytes - 1];
    }
    try_get([&] { return formats::config_from_gguf(reader); });
    try_get([&] {
      const std::optional<Tokenizer> tok = formats::load_gguf_tokenizer(file.path());
      if (tok) {
        const std::vector<int32_t> ids = tok->encode_prompt("The quick brown fox, 1234 times.");
        for (int32_t id : ids)
          if (id < 0 || id >= tok->vocab_size()) fuzz::fail("the GGUF tokenizer gave an id outside its vocabulary");
        (void)tok->decode(ids);
      }
      return 0;
    });
  } catch (const Error&) {
  }
  return 0;
}
