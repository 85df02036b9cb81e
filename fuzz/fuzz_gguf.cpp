// GGUF: the header, every metadata value (arrays of arrays included), the tensor infos and their placement;
// then every value is walked, every getter tried on every key, and the first and last byte of every tensor
// read through the mapping (ASan sees a tensor the checks let past the end of the file). Then what Attend makes
// of the metadata: the model configuration (config_from_gguf) and the tokenizer (tokenizer.ggml.*: a gpt2-kind
// BPE rebuilt as a tokenizer.json, a llama-kind vocabulary as a SentencePiece ModelProto), which encodes a text.
// A file that says it is a LoRA adapter is read onto a small model of its architecture (gpt2, or llama: load_gguf_lora),
// which then runs a forward.
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "fuzz_util.h"

#include <attend/model.h>

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

// A small decoder of llama.cpp's gpt2 or llama layout (d_model 16, 2 layers, 4 heads; llama: 2 KV heads, SwiGLU).
Model small_model(bool llama) {
  ModelConfig c;
  c.vocab_size = 32, c.d_model = 16, c.n_layers = 2, c.n_heads = 4, c.max_seq_len = 8, c.seed = 1;
  c.activation = FfnKind::GELUTanh;
  if (llama) {
    c.norm = NormKind::RMSNorm, c.position = PositionKind::RoPE, c.activation = FfnKind::SwiGLU;
    c.n_kv_heads = 2, c.bias = false, c.tie_embeddings = false;
  }
  return Model(c);
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
    const std::string arch = reader.string_or("general.architecture", "");
    if (reader.string_or("general.type", "") == "adapter" && (arch == "gpt2" || arch == "llama")) {
      Model model = small_model(arch == "llama");
      const int slot = formats::load_gguf_lora(model, file.path(), "", 1.0);
      if (slot != 0 || model.adapters().size() != 1) fuzz::fail("a GGUF LoRA read into another slot than the first");
      Batch b;
      b.B = 1, b.T = 3, b.ids = {1, 2, 3};
      model.forward(b);
    }
  } catch (const Error&) {
  }
  return 0;
}
