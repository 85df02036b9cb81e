// GGUF: round trips of every value type and of tensors at two alignments, the byte layout pinned by a file
// written out by hand, the typed getters, and every kind of malformed file rejected with an error that names
// the file and the key or tensor at fault.
#include "testing.h"

#include "formats/gguf.h"

#include <attend/error.h>
#include <attend/io.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace attend::gguf {
namespace {

namespace fs = std::filesystem;
using testing::expect_error_mentions;

// Each test's own files: CTest runs the tests of this file in parallel processes.
fs::path temp_path(const std::string& name) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return fs::temp_directory_path() / (std::string("attend_test_gguf_") + (test ? test->name() : "") + "_" + name);
}

// A file written byte by byte, little-endian, as the format lays it out.
struct Bytes {
  std::string b;
  Bytes& raw(std::string_view s) {
    b.append(s);
    return *this;
  }
  template <typename T>
  Bytes& put(T v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    b.append(bytes, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& i64(int64_t v) { return put(v); }
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  // GGUF, the version and the two counts.
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) { return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv); }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_string(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  Bytes& tensor(std::string_view name, std::vector<int64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) i64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.append(n, '\0');
    return *this;
  }
  fs::path write(const std::string& name) const {
    const fs::path path = temp_path(name);
    write_file_atomic(path, b);
    return path;
  }
};

std::string random_bytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng.uniform_double() * 256);
  return s;
}

// UTF-8 of two, three and four bytes, and NUL bytes inside.
constexpr char kText[] = "caf\xc3\xa9 \xe4\xb8\xad\xf0\x9f\x98\x80 nul\0in\0side";
const std::string text(kText, sizeof(kText) - 1);

// The 13 value types, each at its edges, and an array of each.
std::vector<std::pair<std::string, Value>> every_value() {
  std::vector<std::pair<std::string, Value>> kv = {
      {"u8", Value::make_uint8(255)},
      {"i8", Value::make_int8(-128)},
      {"u16", Value::make_uint16(65535)},
      {"i16", Value::make_int16(-32768)},
      {"u32", Value::make_uint32(4294967295u)},
      {"i32", Value::make_int32(std::numeric_limits<int32_t>::min())},
      {"f32", Value::make_float32(-1.5e-40f)},  // subnormal
      {"bool.true", Value::make_bool(true)},
      {"bool.false", Value::make_bool(false)},
      {"string", Value::make_string(text)},
      {"empty.string", Value::make_string("")},
      {"u64", Value::make_uint64(std::numeric_limits<uint64_t>::max())},
      {"i64", Value::make_int64(std::numeric_limits<int64_t>::min())},
      {"f64", Value::make_float64(0.1)},
  };
  const size_t scalars = kv.size();
  for (size_t k = 0; k < scalars; ++k) {
    const Value& v = kv[k].second;
    kv.emplace_back("array." + kv[k].first, Value::make_array(v.type, {v, v, v}));
  }
  kv.emplace_back("array.empty", Value::make_array(ValueType::Float32, {}));
  kv.emplace_back("array.nested", Value::make_array(ValueType::Array, {Value::make_array(ValueType::Int32, {Value::make_int32(-1)}),
                                                                      Value::make_array(ValueType::String, {})}));
  return kv;
}

void expect_same(const Value& got, const Value& want, const std::string& key) {
  ASSERT_EQ(got.type, want.type) << key;
  switch (want.type) {
    case ValueType::Float32:
    case ValueType::Float64: EXPECT_EQ(std::memcmp(&got.f, &want.f, sizeof(double)), 0) << key << ": " << got.f; break;
    case ValueType::Bool: EXPECT_EQ(got.b, want.b) << key; break;
    case ValueType::String: EXPECT_EQ(got.s, want.s) << key; break;
    case ValueType::Array:
      EXPECT_EQ(got.element_type, want.element_type) << key;
      ASSERT_EQ(got.array.size(), want.array.size()) << key;
      for (size_t i = 0; i < want.array.size(); ++i) expect_same(got.array[i], want.array[i], key + "[" + std::to_string(i) + "]");
      break;
    default:
      EXPECT_EQ(got.u, want.u) << key;
      EXPECT_EQ(got.i, want.i) << key;
  }
}

TEST(Gguf, EveryValueTypeAndArraysOfEachRoundTrip) {
  Writer w;
  const auto kv = every_value();
  for (const auto& [k, v] : kv) w.set(k, v);
  w.set_uint32("u32", 7);  // an existing key keeps its place and takes the new value
  const fs::path path = temp_path("values.gguf");
  w.write(path);
  const Reader r(path);
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.alignment(), 32u);
  EXPECT_EQ(r.find(kAlignmentKey), nullptr);  // 32 is the default: not written
  ASSERT_EQ(r.metadata().size(), kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(r.metadata()[i].first, kv[i].first);  // file order
    if (kv[i].first != "u32") expect_same(r.metadata()[i].second, kv[i].second, kv[i].first);
  }
  EXPECT_EQ(r.get_uint("u32"), 7u);
  EXPECT_EQ(r.get_string("string"), text);
  EXPECT_EQ(r.get_string("string").size(), 25u);
  EXPECT_EQ(r.get_string("string").find('\0'), 17u);
  EXPECT_TRUE(r.tensors().empty());
  fs::remove(path);
}

TEST(Gguf, TypedGettersConvertWhatFitsAndNameWhatDoesNot) {
  Writer w;
  for (const auto& [k, v] : every_value()) w.set(k, v);
  w.set_uint8("small", 3);
  w.set_int32("negative", -3);
  w.set_strings("tokens", {"a", "\xc4\xa0the", ""});
  w.set_floats("scores", {0.5f, -1.0f});
  w.set_int32s("types", {1, 2, 3});
  w.set_uint32s("ids", {7, 8});
  w.set_int64s("big", {std::numeric_limits<int64_t>::max()});
  w.set_bools("flags", {true, false});
  w.set("huge", Value::make_array(ValueType::UInt64, {Value::make_uint64(std::numeric_limits<uint64_t>::max())}));
  const fs::path path = temp_path("getters.gguf");
  w.write(path);
  const Reader r(path);
  EXPECT_EQ(r.get_uint("small"), 3u);
  EXPECT_EQ(r.get_int("small"), 3);
  EXPECT_EQ(r.get_int("negative"), -3);
  EXPECT_EQ(r.get_float("small"), 3.0);
  EXPECT_EQ(r.get_float("f64"), 0.1);
  EXPECT_EQ(r.get_uint("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r.get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(r.get_bool("bool.true"));
  EXPECT_EQ(r.get_strings("tokens"), (std::vector<std::string>{"a", "\xc4\xa0the", ""}));
  EXPECT_EQ(r.get_floats("scores"), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(r.get_floats("types"), (std::vector<float>{1, 2, 3}));  // integers are numbers
  EXPECT_EQ(r.get_ints("types"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.get_ints("ids"), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(r.get_ints("big"), (std::vector<int64_t>{std::numeric_limits<int64_t>::max()}));
  EXPECT_TRUE(r.get_strings("array.empty").empty());  // an empty array is empty whatever its element type
  EXPECT_EQ(r.find("flags")->array.size(), 2u);
  EXPECT_EQ(r.string_or("absent", "x"), "x");
  EXPECT_EQ(r.uint_or("absent", 9), 9u);
  EXPECT_EQ(r.int_or("absent", -9), -9);
  EXPECT_EQ(r.float_or("absent", 2.5), 2.5);
  EXPECT_FALSE(r.bool_or("absent", false));
  EXPECT_EQ(r.uint_or("small", 9), 3u);

  const std::string file = path.string();
  expect_error_mentions<Error>([&] { r.get_string("absent"); }, {file, "no key 'absent'"});
  expect_error_mentions<Error>([&] { r.get_uint("negative"); }, {file, "'negative'", "int32 -3", "expected a non-negative integer"});
  expect_error_mentions<Error>([&] { r.get_int("u64"); }, {file, "'u64'", "uint64 18446744073709551615", "int64"});
  expect_error_mentions<Error>([&] { r.get_uint("f32"); }, {file, "'f32'", "float32", "expected a non-negative integer"});
  expect_error_mentions<Error>([&] { r.get_float("string"); }, {file, "'string'", "a string", "expected a number"});
  expect_error_mentions<Error>([&] { r.get_string("u8"); }, {file, "'u8'", "uint8 255", "expected a string"});
  expect_error_mentions<Error>([&] { r.get_bool("u8"); }, {file, "'u8'", "expected a bool"});
  expect_error_mentions<Error>([&] { r.get_strings("types"); }, {file, "'types'", "array of 3 int32", "expected an array of string"});
  expect_error_mentions<Error>([&] { r.get_strings("string"); }, {file, "'string'", "a string", "expected an array of string"});
  expect_error_mentions<Error>([&] { r.get_floats("tokens"); }, {file, "'tokens'", "array of 3 string", "array of numbers"});
  expect_error_mentions<Error>([&] { r.get_ints("scores"); }, {file, "'scores'", "array of 2 float32", "array of integers"});
  expect_error_mentions<Error>([&] { r.get_ints("huge"); }, {file, "'huge'", "18446744073709551615", "int64"});
  expect_error_mentions<Error>([&] { r.string_or("u8", "x"); }, {file, "'u8'", "expected a string"});  // present: checked
  fs::remove(path);
}

// F32, F16 and Q8_0 tensors of several shapes at alignments 32 and 64: offsets and the data section aligned,
// the bytes as given, general.alignment written when it is not the default.
TEST(Gguf, TensorsRoundTripAtAlignments32And64) {
  struct T {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    uint64_t bytes;
  };
  const std::vector<T> specs = {{"f32.matrix", {5, 3}, tensor_type::F32, 60},
                                {"f16.vector", {7}, tensor_type::F16, 14},
                                {"q8_0.matrix", {64, 3}, tensor_type::Q8_0, 6 * 34},
                                {"f32.scalar", {}, tensor_type::F32, 4},
                                {"q8_0.4d", {32, 2, 1, 2}, tensor_type::Q8_0, 4 * 34}};
  for (uint64_t alignment : {32u, 64u}) {
    SCOPED_TRACE(alignment);
    Writer w;
    w.set_string("general.architecture", "test");
    std::vector<std::string> data;
    for (size_t i = 0; i < specs.size(); ++i) {
      data.push_back(random_bytes(specs[i].bytes, 100 + i));
      ASSERT_EQ(tensor_bytes(specs[i].type, specs[i].dims), specs[i].bytes);
      if (i % 2 == 0)
        w.add_tensor(specs[i].name, specs[i].dims, specs[i].type, data[i].data(), data[i].size());
      else  // the owning overload
        w.add_tensor(specs[i].name, specs[i].dims, specs[i].type, std::vector<uint8_t>(data[i].begin(), data[i].end()));
    }
    const fs::path path = temp_path("tensors.gguf");
    w.write(path, alignment);
    std::shared_ptr<const void> mapping;
    const uint8_t* last = nullptr;
    {
      const Reader r(path);
      EXPECT_EQ(r.alignment(), alignment);
      if (alignment == 32) {
        EXPECT_EQ(r.find(kAlignmentKey), nullptr);
      } else {
        EXPECT_EQ(r.get_uint(kAlignmentKey), alignment);
      }
      EXPECT_EQ(r.data_offset() % alignment, 0u);
      ASSERT_EQ(r.tensors().size(), specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        const TensorInfo& t = r.tensors()[i];
        EXPECT_EQ(t.name, specs[i].name);
        EXPECT_EQ(t.dims, specs[i].dims);
        EXPECT_EQ(t.type, specs[i].type);
        EXPECT_EQ(t.bytes, specs[i].bytes);
        EXPECT_EQ(t.offset % alignment, 0u) << t.name;
        EXPECT_EQ(t.data, static_cast<const uint8_t*>(r.mapping().get()) + r.data_offset() + t.offset);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.data), t.bytes), data[i]) << t.name;
        EXPECT_EQ(r.tensor(specs[i].name), &t);
      }
      EXPECT_EQ(r.tensors()[2].numel(), 192);
      EXPECT_EQ(r.tensors()[3].numel(), 1);
      EXPECT_EQ(r.tensor("absent"), nullptr);
      EXPECT_EQ(fs::file_size(path) % alignment, 0u);  // each tensor padded, the last one too (as llama.cpp writes)
      mapping = r.mapping();
      last = r.tensors().back().data;
    }
    // The mapping outlives the Reader.
    EXPECT_EQ(std::memcmp(last, data.back().data(), data.back().size()), 0);
    fs::remove(path);
  }
}

// The layout written out byte by byte: magic, version 3, one tensor, one key ("general.name" = "tiny"), the
// tensor info of "w" (f32 [2, 3], offset 0), zero padding to 32, 24 bytes of data, padding to 32. The Reader
// reads it and the Writer writes exactly these bytes.
TEST(Gguf, ByteLayoutPinnedByAHandWrittenFile) {
  const std::vector<uint8_t> bytes = {
      'G', 'G', 'U', 'F',                              // magic
      3, 0, 0, 0,                                      // version 3 (uint32)
      1, 0, 0, 0, 0, 0, 0, 0,                          // 1 tensor (uint64)
      1, 0, 0, 0, 0, 0, 0, 0,                          // 1 key (uint64)
      12, 0, 0, 0, 0, 0, 0, 0,                         // key: 12 bytes
      'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'n', 'a', 'm', 'e',
      8, 0, 0, 0,                                      // value type 8: string
      4, 0, 0, 0, 0, 0, 0, 0, 't', 'i', 'n', 'y',      // "tiny"
      1, 0, 0, 0, 0, 0, 0, 0, 'w',                     // tensor name "w"
      2, 0, 0, 0,                                      // 2 dimensions (uint32)
      2, 0, 0, 0, 0, 0, 0, 0,                          // ne0 = 2 (int64), the row length
      3, 0, 0, 0, 0, 0, 0, 0,                          // ne1 = 3
      0, 0, 0, 0,                                      // ggml type 0: f32
      0, 0, 0, 0, 0, 0, 0, 0,                          // offset 0 (uint64)
  };  // 101 bytes
  std::string file(bytes.begin(), bytes.end());
  ASSERT_EQ(file.size(), 101u);
  file.append(128 - 101, '\0');  // padding to the alignment: data from byte 128
  const float values[6] = {1, 2, 3, 4, 5, -0.5f};
  file.append(reinterpret_cast<const char*>(values), sizeof(values));
  file.append(160 - 152, '\0');  // the Writer pads the last tensor too
  const fs::path path = temp_path("hand.gguf");
  write_file_atomic(path, file);
  const Reader r(path);
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.get_string("general.name"), "tiny");
  EXPECT_EQ(r.data_offset(), 128u);
  ASSERT_EQ(r.tensors().size(), 1u);
  const TensorInfo& w = r.tensors()[0];
  EXPECT_EQ(w.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.bytes, 24u);
  EXPECT_EQ(std::memcmp(w.data, values, sizeof(values)), 0);

  Writer writer;
  writer.set_string("general.name", "tiny");
  writer.add_tensor("w", {2, 3}, tensor_type::F32, values, sizeof(values));
  const fs::path written = temp_path("hand_written.gguf");
  writer.write(written);
  EXPECT_EQ(read_file(written), file);
  fs::remove(path);
  fs::remove(written);
}

TEST(Gguf, Version2ReadsAsVersion3) {
  const fs::path path = Bytes().header(0, 1, 2).kv_u32("k", 5).write("v2.gguf");
  const Reader r(path);
  EXPECT_EQ(r.version(), 2u);
  EXPECT_EQ(r.get_uint("k"), 5u);
  fs::remove(path);
}

TEST(Gguf, TypeTraitsFollowGgml) {
  struct Expected {
    uint32_t id;
    const char* name;
    int64_t block, bytes;
  };
  // ggml.c's type_traits: blck_size and sizeof(block_*), ggml-common.h.
  const Expected table[] = {{0, "f32", 1, 4},        {1, "f16", 1, 2},         {2, "q4_0", 32, 18},
                            {3, "q4_1", 32, 20},     {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
                            {8, "q8_0", 32, 34},     {9, "q8_1", 32, 36},      {10, "q2_K", 256, 84},
                            {11, "q3_K", 256, 110},  {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
                            {14, "q6_K", 256, 210},  {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66},
                            {17, "iq2_xs", 256, 74}, {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
                            {20, "iq4_nl", 32, 18},  {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},
                            {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},        {25, "i16", 1, 2},
                            {26, "i32", 1, 4},       {27, "i64", 1, 8},        {28, "f64", 1, 8},
                            {29, "iq1_m", 256, 56},  {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},
                            {35, "tq2_0", 256, 66}};
  for (const Expected& e : table) {
    const TypeTraits* t = type_traits(e.id);
    ASSERT_NE(t, nullptr) << e.id;
    EXPECT_STREQ(t->name, e.name);
    EXPECT_EQ(t->block, e.block) << e.name;
    EXPECT_EQ(t->bytes, e.bytes) << e.name;
    EXPECT_EQ(type_traits_by_name(e.name), t);
  }
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 39u, 1000u}) EXPECT_EQ(type_traits(removed), nullptr) << removed;
  EXPECT_EQ(tensor_bytes(tensor_type::Q4_K, {512, 3}), 2 * 3 * 144u);
  EXPECT_FALSE(tensor_bytes(tensor_type::Q4_K, {100, 3}).has_value());
  EXPECT_FALSE(tensor_bytes(tensor_type::F32, {1, 1, 1, 1, 1}).has_value());
  EXPECT_FALSE(tensor_bytes(tensor_type::F32, {4, 0}).has_value());
  EXPECT_FALSE(tensor_bytes(99, {4}).has_value());
}

// One file per malformation; each error names the file and what is wrong.
struct Malformed {
  const char* what;
  Bytes file;
  std::vector<std::string> mentions;
};

void expect_rejected(const std::vector<Malformed>& cases) {
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path path = c.file.write("bad.gguf");
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back(path.string());
    expect_error_mentions<Error>([&] { Reader r(path); }, mentions);
    fs::remove(path);
  }
}

TEST(GgufErrors, BadMagicAndVersions) {
  expect_rejected({
      {"magic", Bytes().raw("GGML").u32(3).u64(0).u64(0), {"\"GGML\"", "expected the magic \"GGUF\""}},
      {"version 1", Bytes().header(0, 0, 1), {"version 1", "32-bit counts", "expected version 2 or 3"}},
      {"version 4", Bytes().header(0, 0, 4), {"version 4", "expected 2 or 3"}},
      {"big-endian", Bytes().raw("GGUF").u32(0x03000000).u64(0).u64(0), {"version 50331648", "big-endian"}},
  });
}

TEST(GgufErrors, CountsLargerThanTheFileCouldHold) {
  expect_rejected({
      {"keys", Bytes().header(0, 1000).kv_u32("k", 1), {"1000 metadata keys", "more than the 17 bytes"}},
      {"tensors", Bytes().header(uint64_t{1} << 62, 0), {"4611686018427387904 tensors"}},
      {"both", Bytes().header(1, 2).kv_u32("a", 1).zeros(10), {"1 tensors and 2 metadata keys"}},
      {"negative", Bytes().header(0, std::numeric_limits<uint64_t>::max()), {"18446744073709551615 metadata keys"}},
  });
}

TEST(GgufErrors, StringsLongerThanTheRestOfTheFile) {
  expect_rejected({
      {"key", Bytes().header(0, 1).u64(1000).raw("k").u32(4).u32(1), {"the key of metadata entry 0", "string of 1000 bytes", "longer than the"}},
      {"value", Bytes().header(0, 1).str("general.name").u32(8).u64(uint64_t{1} << 63).raw("x"),
       {"key 'general.name'", "string of 9223372036854775808 bytes"}},
      {"tensor name", Bytes().header(1, 0).u64(40).raw("w").u32(1).i64(4).u32(0).u64(0), {"the name of tensor 0", "string of 40 bytes"}},
  });
}

TEST(GgufErrors, UnknownValueTypes) {
  expect_rejected({
      {"value", Bytes().header(0, 1).str("general.x").u32(13).u64(0), {"key 'general.x'", "value type 13", "expected a GGUF value type"}},
      {"element", Bytes().header(0, 1).str("arr").u32(9).u32(99).u64(1).u64(0), {"key 'arr'", "array of value type 99"}},
  });
}

TEST(GgufErrors, ArraysTooLongOrNestedTooDeep) {
  Bytes deep = Bytes().header(0, 1).str("deep").u32(9);
  for (int d = 0; d < kMaxArrayDepth; ++d) deep.u32(9).u64(1);  // arrays of arrays ...
  deep.u32(4).u64(1).u32(7);                                     // ... down to an array of uint32
  Bytes ok = Bytes().header(0, 1).str("deep").u32(9);
  for (int d = 1; d < kMaxArrayDepth; ++d) ok.u32(9).u64(1);
  ok.u32(4).u64(1).u32(7);
  const fs::path path = ok.write("deep_ok.gguf");
  EXPECT_EQ(Reader(path).find("deep")->array.at(0).type, ValueType::Array);  // kMaxArrayDepth deep is fine
  fs::remove(path);
  expect_rejected({
      {"deep", deep, {"key 'deep'", "nests arrays more than 8 deep"}},
      {"long", Bytes().header(0, 1).str("tokens").u32(9).u32(8).u64(1000000).str("a"),
       {"key 'tokens'", "array of 1000000 string", "more than the 9 bytes left"}},
      {"long u64", Bytes().header(0, 1).str("ids").u32(9).u32(10).u64(3).u64(1).u64(2), {"key 'ids'", "array of 3 uint64"}},
      {"huge", Bytes().header(0, 1).str("n").u32(9).u32(0).u64(std::numeric_limits<uint64_t>::max()), {"key 'n'", "array of 18446744073709551615 uint8"}},
      // Memory: each element read becomes a Value of about 100 bytes; 2^23 elements in all at the most.
      {"elements", Bytes().header(0, 2).str("a").u32(9).u32(0).u64(3).u8(1).u8(2).u8(3).str("b").u32(9).u32(0).u64(kMaxArrayElements - 2),
       {"key 'b'", "array of 8388606 uint8", "past the 8388608 array elements a file may hold in all (3 before it)"}},
  });
}

TEST(GgufErrors, DuplicateKeysAndTensorNames) {
  expect_rejected({
      {"key", Bytes().header(0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_u32("a", 3), {"duplicate key 'a'", "entries 0 and 2"}},
      {"tensor",
       Bytes().header(2, 0).tensor("w", {4}, tensor_type::F32, 0).tensor("w", {4}, tensor_type::F32, 32).pad(32).zeros(64),
       {"duplicate tensor name 'w'", "tensors 0 and 1"}},
  });
}

TEST(GgufErrors, BadDimensionsAndTypes) {
  const auto one = [](std::vector<int64_t> dims, uint32_t type) {
    return Bytes().header(1, 0).tensor("blk.0.w", std::move(dims), type, 0).pad(32).zeros(4096);
  };
  expect_rejected({
      {"5 dims", one({1, 1, 1, 1, 1}, tensor_type::F32), {"tensor 'blk.0.w'", "5 dimensions", "at most 4"}},
      {"zero", one({4, 0}, tensor_type::F32), {"tensor 'blk.0.w'", "dimension 1 of size 0", "positive"}},
      {"negative", one({-4}, tensor_type::F32), {"tensor 'blk.0.w'", "dimension 0 of size -4"}},
      {"overflow", one({int64_t{1} << 40, int64_t{1} << 30}, tensor_type::F32), {"tensor 'blk.0.w'", "overflows int64"}},
      {"bytes overflow", one({int64_t{1} << 40, int64_t{1} << 22}, tensor_type::F32), {"tensor 'blk.0.w'", "2^64 bytes or more"}},
      {"block", one({48, 2}, tensor_type::Q8_0), {"tensor 'blk.0.w'", "q8_0 [48, 2]", "rows of 48", "block of 32"}},
      {"k block", one({128}, tensor_type::Q4_K), {"tensor 'blk.0.w'", "rows of 128", "q4_K's block of 256"}},
      {"removed type", one({4}, 4), {"tensor 'blk.0.w'", "ggml type 4"}},
      {"unknown type", one({4}, 39), {"tensor 'blk.0.w'", "ggml type 39"}},
  });
}

TEST(GgufErrors, AlignmentOffsetsAndPlacement) {
  expect_rejected({
      {"alignment 48", Bytes().header(0, 1).kv_u32(kAlignmentKey, 48), {"general.alignment", "48", "power of two"}},
      {"alignment 0", Bytes().header(0, 1).kv_u32(kAlignmentKey, 0), {"general.alignment", "power of two"}},
      {"alignment u64", Bytes().header(0, 1).str(kAlignmentKey).u32(10).u64(32), {"general.alignment", "uint64 32", "expected a uint32"}},
      {"offset", Bytes().header(1, 0).tensor("w", {4}, tensor_type::F32, 16).pad(32).zeros(64), {"tensor 'w'", "offset 16", "alignment 32"}},
      {"offset 64", Bytes().header(1, 1).kv_u32(kAlignmentKey, 64).tensor("w", {4}, tensor_type::F32, 32).pad(64).zeros(128),
       {"tensor 'w'", "offset 32", "alignment 64"}},
      {"past the end", Bytes().header(1, 0).tensor("w", {8}, tensor_type::F32, 0).pad(32).zeros(31),
       {"tensor 'w'", "32 bytes at offset 0", "runs past the end", "holds 31 bytes"}},
      {"far past the end", Bytes().header(1, 0).tensor("w", {8}, tensor_type::F32, uint64_t{1} << 63).pad(32).zeros(64),
       {"tensor 'w'", "runs past the end"}},
      {"no data section", Bytes().header(1, 0).tensor("w", {1}, tensor_type::F32, 0), {"tensor 'w'", "runs past the end", "holds 0 bytes"}},
      {"overlap",
       Bytes().header(2, 0).tensor("a", {16}, tensor_type::F32, 32).tensor("b", {8}, tensor_type::F32, 64).pad(32).zeros(128),
       {"tensor 'b'", "overlaps the tensor before it, 'a' (up to 96)"}},
      {"out of order",
       Bytes().header(2, 0).tensor("a", {8}, tensor_type::F32, 32).tensor("b", {8}, tensor_type::F32, 0).pad(32).zeros(128),
       {"tensor 'b'", "overlaps", "'a'"}},
  });
}

TEST(GgufErrors, BoolsAreZeroOrOne) {
  expect_rejected({{"bool", Bytes().header(0, 1).str("flag").u32(7).u8(2), {"key 'flag'", "bool byte 2", "expected 0 or 1"}}});
}

// Every prefix of a valid file that cuts something it needs is an error that names the file, never a crash;
// the padding after the last tensor is not needed.
TEST(GgufErrors, TruncatedAtEveryByte) {
  Writer w;
  for (const auto& [k, v] : every_value()) w.set(k, v);
  const std::string a = random_bytes(34 * 2, 1), b = random_bytes(12, 2);
  w.add_tensor("a", {64}, tensor_type::Q8_0, a.data(), a.size());
  w.add_tensor("b", {3}, tensor_type::F32, b.data(), b.size());
  const fs::path full = temp_path("full.gguf");
  w.write(full, 64);
  const std::string bytes = read_file(full);
  uint64_t needed = 0, data_offset = 0;
  {
    const Reader r(full);
    data_offset = r.data_offset();
    needed = r.data_offset() + r.tensors().back().offset + r.tensors().back().bytes;
  }
  const fs::path path = temp_path("cut.gguf");
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A new file each time, without fsync: rewriting one in place makes ext4 flush it at every close.
    fs::remove(path);
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
    if (n < needed) {
      try {
        Reader r(path);
        ADD_FAILURE() << "a file cut to " << n << " bytes opened";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
        if (n >= data_offset) {
          EXPECT_NE(std::string(e.what()).find("runs past the end"), std::string::npos) << e.what();
        }
      }
    } else {
      EXPECT_NO_THROW((void)Reader(path)) << n;
    }
  }
  fs::remove(path);
  fs::remove(full);
}

TEST(GgufErrors, NotAFile) {
  expect_error_mentions<Error>([] { Reader r(temp_path("does_not_exist.gguf")); }, {"does_not_exist.gguf", "cannot open"});
  expect_error_mentions<Error>([] { Reader r(fs::temp_directory_path()); }, {"not a regular file"});
}

TEST(GgufErrors, WriterChecksWhatItIsGiven) {
  Writer w;
  const std::string data(64, '\0');
  w.add_tensor("w", {16}, tensor_type::F32, data.data(), 64);
  expect_error_mentions<Error>([&] { w.add_tensor("w", {16}, tensor_type::F32, data.data(), 64); }, {"two tensors are called 'w'"});
  expect_error_mentions<Error>([&] { w.add_tensor("x", {16}, tensor_type::F32, data.data(), 60); }, {"'x'", "takes 64 bytes, 60 given"});
  expect_error_mentions<Error>([&] { w.add_tensor("x", {16}, tensor_type::Q8_0, data.data(), 34); }, {"'x'", "q8_0's block of 32"});
  expect_error_mentions<Error>([&] { w.add_tensor("x", {16}, 31, data.data(), 64); }, {"'x'", "ggml type 31"});
  expect_error_mentions<Error>([&] { w.add_tensor("x", {1, 1, 1, 1, 16}, tensor_type::F32, data.data(), 64); }, {"'x'", "5 dimensions"});
  expect_error_mentions<Error>([&] { w.add_tensor(std::string(64, 'n'), {16}, tensor_type::F32, data.data(), 64); }, {"64 bytes, expected 1 to 63"});
  expect_error_mentions<Error>([&] { w.set("k", Value::make_array(ValueType::String, {Value::make_uint8(1)})); },
                               {"key 'k'", "array of string", "element 0 is uint8"});
  expect_error_mentions<Error>([&] { w.set("k", Value{.type = ValueType::UInt8, .u = 256}); }, {"key 'k'", "uint8 256", "range"});
  expect_error_mentions<Error>([&] { w.set("k", Value{.type = ValueType{13}}); }, {"key 'k'", "value type 13"});
  expect_error_mentions<Error>([&] { w.set_uint64(kAlignmentKey, 64); }, {"general.alignment", "uint32 power of two"});
  expect_error_mentions<Error>([&] { w.write(temp_path("never.gguf"), 48); }, {"never.gguf", "alignment 48"});
  w.set_uint32(kAlignmentKey, 64);
  expect_error_mentions<Error>([&] { w.write(temp_path("never.gguf"), 32); }, {"general.alignment is set to 64", "alignment 32"});
  EXPECT_FALSE(fs::exists(temp_path("never.gguf")));
  const fs::path path = temp_path("aligned.gguf");
  w.write(path, 64);  // the key as set, written once
  const Reader r(path);
  EXPECT_EQ(r.alignment(), 64u);
  EXPECT_EQ(r.metadata().size(), 1u);
  fs::remove(path);
}

}  // namespace
}  // namespace attend::gguf
