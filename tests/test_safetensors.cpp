// safetensors: exact round trips, the byte layout checked by hand, bf16/fp16 conversion, and every kind
// of malformed file rejected with an error that names the file and the tensor.
#include "testing.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/parameter.h>
#include <attend/safetensors.h>

#include "train/optimizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

namespace attend {
namespace {

namespace fs = std::filesystem;
using testing::expect_error_mentions;

fs::path temp_path(const std::string& name) { return fs::temp_directory_path() / ("attend_test_" + name); }

// A file of the given header and data, written as the format says: length, JSON, bytes.
fs::path write_raw(const std::string& name, const std::string& header, const std::string& data, int64_t length = -1) {
  std::string file(8, '\0');
  const uint64_t n = length >= 0 ? static_cast<uint64_t>(length) : header.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  file += header + data;
  const fs::path path = temp_path(name);
  write_file_atomic(path, file);
  return path;
}

std::string floats(std::initializer_list<float> values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.begin(), bytes.size());
  return bytes;
}

TEST(Safetensors, RoundTripIsBitExactAndKeepsOrderAndMetadata) {
  Tensor a(Shape{2, 3}, {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f});
  Tensor b(Shape{4}, {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 7.0f});
  Tensor scalar(Shape{}, {42.0f});
  const fs::path path = temp_path("roundtrip.safetensors");
  write_safetensors(path, {{"z.weight", &a}, {"a.bias", &b}, {"scalar", &scalar}}, {{"format", "pt"}});
  const SafetensorsReader r(path);
  ASSERT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.tensors()[0].name, "z.weight");  // file order, not alphabetical
  EXPECT_EQ(r.metadata().at("format"), "pt");
  const Tensor a2 = r.load("z.weight"), b2 = r.load("a.bias"), s2 = r.load("scalar");
  EXPECT_EQ(a2.shape(), a.shape());
  EXPECT_EQ(std::memcmp(a2.data(), a.data(), 6 * 4), 0);
  EXPECT_EQ(std::memcmp(b2.data(), b.data(), 4 * 4), 0);
  EXPECT_EQ(s2.shape().rank(), 0);
  EXPECT_EQ(s2[0], 42.0f);
  fs::remove(path);
}

TEST(Safetensors, ByteLayoutFollowsTheFormat) {
  Tensor a(Shape{2}, {1.0f, 2.0f});
  const fs::path path = temp_path("layout.safetensors");
  write_safetensors(path, {{"a", &a}});
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian on x86
  EXPECT_EQ((8 + n) % 8, 0u);        // the data starts 8-byte aligned
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(bytes.size(), 8 + n + 8);
  EXPECT_EQ(bytes.substr(8 + n), floats({1.0f, 2.0f}));
  fs::remove(path);
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  const fs::path path = write_raw("hand.safetensors",
                                  R"({"w":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]},)"
                                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                  floats({5, 6, 7, 8}));
  const SafetensorsReader r(path);
  const Tensor w = r.load("w"), b = r.load("b");
  EXPECT_EQ(w[0], 7.0f);
  EXPECT_EQ(w[1], 8.0f);
  EXPECT_EQ(b[0], 5.0f);
  fs::remove(path);
}

// Found by fuzz/fuzz_safetensors' long run: an empty F16 (or BF16) tensor passed memcpy a null buffer (UBSan).
// Empty tensors of every float dtype load as empty tensors.
TEST(Safetensors, EmptyTensorsOfEveryFloatDtypeLoad) {
  const fs::path path = write_raw("empty.safetensors",
                                  R"({"h":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]},)"
                                  R"("b":{"dtype":"BF16","shape":[3,0],"data_offsets":[0,0]},)"
                                  R"("f":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})",
                                  "");
  const SafetensorsReader r(path);
  for (const char* name : {"h", "b", "f"}) EXPECT_EQ(r.load(name).numel(), 0) << name;
  fs::remove(path);
}

TEST(Safetensors, Bf16AndFp16RoundToNearestEven) {
  // bf16 keeps 8 bits of mantissa. 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even
  // mantissa, 1. 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: it goes to 1 + 2^-6.
  // 1 + 2^-8 + 2^-20 is just above halfway: it rounds up.
  Tensor t(Shape{5}, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 65504.0f});
  const fs::path path = temp_path("half.safetensors");
  write_safetensors(path, {{"t", &t}}, {}, DType::BF16);
  const Tensor bf = SafetensorsReader(path).load("t");
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(bf[2], 1.0f + 0x1p-7f);
  EXPECT_EQ(bf[3], -2.5f);
  EXPECT_EQ(SafetensorsReader(path).tensors()[0].dtype, DType::BF16);
  // fp16 keeps 10 bits: the same halfway cases one level down; 65504 is its largest finite value.
  Tensor h(Shape{3}, {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f});
  write_safetensors(path, {{"h", &h}}, {}, DType::F16);
  const Tensor f16 = SafetensorsReader(path).load("h");
  EXPECT_EQ(f16[0], 1.0f);
  EXPECT_EQ(f16[1], 1.0f + 0x1p-9f);
  EXPECT_EQ(f16[2], 65504.0f);
  fs::remove(path);
}

// A piece of rows is those rows of the whole tensor, in each float dtype (halves widened exactly); rows outside
// the tensor are an error naming it.
TEST(Safetensors, RowsOfATensorAreThoseOfTheWhole) {
  Tensor t(Shape{5, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15.5f});
  const fs::path path = temp_path("rows.safetensors");
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    write_safetensors(path, {{"t", &t}}, {}, dtype);
    const SafetensorsReader r(path);
    const Tensor whole = r.load("t");
    for (const auto& [row0, rows] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {1, 2}, {4, 1}, {3, 0}}) {
      std::vector<float> piece(static_cast<size_t>(rows * 3), -1.0f);
      r.load_rows_into("t", row0, rows, piece.data());
      for (int64_t i = 0; i < rows * 3; ++i) EXPECT_EQ(piece[i], whole[row0 * 3 + i]) << dtype_name(dtype) << " " << row0;
    }
    std::vector<float> out(15);
    expect_error_mentions<Error>([&] { r.load_rows_into("t", 4, 2, out.data()); }, {"rows [4, 6)", "'t'", "[5, 3]"});
    expect_error_mentions<Error>([&] { r.load_rows_into("u", 0, 1, out.data()); }, {"no tensor 'u'"});
  }
  fs::remove(path);
}

TEST(Safetensors, MalformedFilesAreRejectedWithTheFileAndTensorNamed) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    std::string name, header, data;
    int64_t length;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"short", "", "", 0, {"too short"}},
      {"past_end", ok, floats({1, 2}), 1000, {"runs past the end"}},
      {"huge_header", ok, floats({1, 2}), int64_t{1} << 40, {"over the 100 MB limit"}},
      {"bad_json", "{\"w\": [", "", -1, {"not valid JSON"}},
      {"truncated", ok, floats({1}), -1, {"'w'", "outside the 4 bytes of data"}},
      {"wrong_size", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2}), -1,
       {"'w'", "needs 12 bytes"}},
      {"bad_dtype", R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", floats({1, 2}), -1, {"'w'", "Q4"}},
      {"no_offsets", R"({"w":{"dtype":"F32","shape":[2]}})", floats({1, 2}), -1, {"'w'", "data_offsets"}},
      {"negative_shape", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2}), -1,
       {"'w'", "shape"}},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       floats({1, 2, 3}), -1, {"overlap"}},
      {"not_object", "[1, 2]", "", -1, {"expected a JSON object"}},
      // Found by fuzz/fuzz_safetensors: nlohmann throws out_of_range, not parse_error, for this number.
      {"number_overflow", R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,8]}})", floats({1, 2}), -1,
       {"not valid JSON", "number overflow"}},
  };
  for (const Case& c : cases) {
    const fs::path path = c.name == "short" ? temp_path("short.safetensors") : write_raw(c.name, c.header, c.data, c.length);
    if (c.name == "short") write_file_atomic(path, "abc");
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back(path.string());
    expect_error_mentions<Error>([&] { SafetensorsReader r(path); }, mentions);
    fs::remove(path);
  }
}

TEST(Safetensors, LoadChecksNamesShapesAndDtypes) {
  Tensor a(Shape{2, 3});
  const fs::path path = temp_path("load.safetensors");
  write_safetensors(path, {{"a", &a}});
  const SafetensorsReader r(path);
  expect_error_mentions<Error>([&] { r.load("b"); }, {"no tensor 'b'", path.string()});
  Tensor wrong(Shape{3, 2});
  expect_error_mentions<Error>([&] { r.load_into("a", wrong.view()); }, {"'a'", "[2, 3]", "expected [3, 2]"});
  const fs::path ints = write_raw("ints.safetensors", R"({"i":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                  std::string(4, '\0'));
  expect_error_mentions<Error>([&] { SafetensorsReader(ints).load("i"); }, {"'i'", "I32"});
  expect_error_mentions<Error>([&] { write_safetensors(path, {{"a", &a}, {"a", &a}}); }, {"two tensors are called 'a'"});
  fs::remove(path);
  fs::remove(ints);
}

// Found by fuzz/fuzz_safetensors: the optimiser's step in the metadata went through std::stoll, whose
// std::invalid_argument was no attend::Error.
TEST(Safetensors, OptimizerStateMetadataIsChecked) {
  Parameter w("w", Shape{2}, Role::FfnIn);
  train::Optimizer optimizer(train::OptimizerConfig{}, {&w});
  const std::string header = R"({"__metadata__":{"optimizer":"adamw","optimizer.step":"STEP","optimizer.beta2_product":"PRODUCT"},)"
                             R"("w.m":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("w.v":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  auto state = [&](const std::string& step, const std::string& product) {
    std::string h = header;
    h.replace(h.find("STEP"), 4, step);
    h.replace(h.find("PRODUCT"), 7, product);
    return write_raw("optimizer.safetensors", h, floats({1, 2, 3, 4}));
  };
  optimizer.load_state(SafetensorsReader(state("7", "0.5")));
  EXPECT_EQ(optimizer.steps(), 7);
  struct Case {
    std::string step, product, mention;
  };
  for (const Case& c : std::vector<Case>{{"three", "0.5", "'optimizer.step' is 'three', expected a number"},
                                         {"7x", "0.5", "'optimizer.step' is '7x'"},
                                         {"99999999999999999999", "0.5", "'optimizer.step'"},
                                         {"-1", "0.5", "expected a non-negative step"},
                                         {"7", "", "'optimizer.beta2_product' is ''"},
                                         {"7", "1e999", "'optimizer.beta2_product' is '1e999'"},
                                         {"7", "1.5", "product of betas in [0, 1]"}}) {
    const fs::path path = state(c.step, c.product);
    expect_error_mentions<Error>([&] { optimizer.load_state(SafetensorsReader(path)); }, {path.string(), c.mention});
  }
  fs::remove(temp_path("optimizer.safetensors"));
}

}  // namespace
}  // namespace attend
