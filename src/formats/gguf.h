// GGUF (versions 2 and 3): llama.cpp's single-file container of metadata and tensors, read and written.
// Only the container: what the keys mean for a model is the model mapping's business.
//
//   "GGUF"                         magic, 4 bytes
//   uint32  version                2 or 3 (same layout; version 1 had 32-bit counts and is refused)
//   uint64  tensor count, uint64 metadata count
//   metadata count times:          key (string), uint32 value type, the value
//   tensor count times:            name (string), uint32 n_dims (at most 4), n_dims int64 dims (dims[0] is the
//                                  row length, innermost), uint32 ggml type id, uint64 offset into the data
//   zero padding to the alignment  (general.alignment, a uint32 power of two; 32 when absent)
//   the data section               each tensor at its offset (a multiple of the alignment)
//
// Everything is little-endian. A string is a uint64 byte count and the bytes (no NUL; NULs inside are kept).
// A value is one of the 13 ValueTypes; an array is a uint32 element type, a uint64 count and the elements
// (arrays of arrays are read up to kMaxArrayDepth deep; llama.cpp writes none).
//
// Reader maps the file read-only and checks everything at open, before any of it is trusted: counts, string
// lengths and array sizes against the bytes left, value types, duplicate keys and tensor names, dimensions,
// type ids and block sizes, alignment, and each tensor's bytes inside the file and after the previous
// tensor's. A bad file is an attend::Error that names the file, the key or tensor, and what was expected.
// Writer writes the same layout to a temporary file and renames it into place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attend::gguf {

// The value types of metadata, by their ids in the file (gguf.h's enum gguf_type).
enum class ValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12
};
// "uint8", "int32", "float32", "bool", "string", "array", ...; "unknown" for an id outside the enum.
const char* value_type_name(ValueType type);
bool is_integer(ValueType type);  // UInt8 ... Int64
bool is_float(ValueType type);    // Float32, Float64

inline constexpr int kMaxArrayDepth = 8;   // arrays of arrays nested deeper than this are refused
// Array elements a file may hold in all (a Value takes about 100 bytes: this bounds the metadata's memory near
// 800 MB; the largest tokenizers hold under a million: Gemma 3's 262,144 tokens, scores and types).
inline constexpr uint64_t kMaxArrayElements = uint64_t{1} << 23;
inline constexpr int kMaxDims = 4;         // GGML_MAX_DIMS
inline constexpr uint64_t kDefaultAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT
inline constexpr const char* kAlignmentKey = "general.alignment";

// One metadata value. Unsigned integers are in `u`, signed ones in `i`, Float32/Float64 in `f`, Bool in `b`,
// String in `s`; an Array holds its elements in `array`, each of type `element_type`.
struct Value {
  ValueType type = ValueType::UInt32;
  ValueType element_type = ValueType::UInt8;  // arrays only
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<Value> array;

  static Value make_uint8(uint8_t v);
  static Value make_int8(int8_t v);
  static Value make_uint16(uint16_t v);
  static Value make_int16(int16_t v);
  static Value make_uint32(uint32_t v);
  static Value make_int32(int32_t v);
  static Value make_uint64(uint64_t v);
  static Value make_int64(int64_t v);
  static Value make_float32(float v);
  static Value make_float64(double v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_array(ValueType element_type, std::vector<Value> elements);
};
// What a value is, for messages: "a string", "uint32 7", "int8 -3", "an array of 3 float32".
std::string describe(const Value& value);

// ggml tensor types by their ids in the file (ggml.h's enum ggml_type; ids 4, 5 and 31-33, 36-38 were removed
// from the format). Block sizes and bytes per block as ggml.c's type_traits (sizeof(block_*) of ggml-common.h).
struct TypeTraits {
  uint32_t id;
  const char* name;  // ggml's: "f32", "q8_0", "q4_K", ...
  int64_t block;     // elements per block
  int64_t bytes;     // bytes per block
};
const TypeTraits* type_traits(uint32_t id);  // nullptr for an id the format does not define
const TypeTraits* type_traits_by_name(std::string_view name);  // by ggml's name ("q8_0"); nullptr when unknown
namespace tensor_type {  // the ids, for readable code: gguf::tensor_type::Q8_0
inline constexpr uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10,
                          Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ2_XXS = 16, IQ2_XS = 17,
                          IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23, I8 = 24,
                          I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35;
}  // namespace tensor_type

// The bytes a tensor of `dims` (dims[0] the row length) and ggml type `type` takes; nullopt when the type is
// unknown, there are more than kMaxDims dimensions, a dimension is not positive, the product overflows, or
// the row length is not a multiple of the type's block.
std::optional<uint64_t> tensor_bytes(uint32_t type, const std::vector<int64_t>& dims);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // as in the file: dims[0] is the row length (ne0), innermost
  uint32_t type = 0;          // ggml type id
  uint64_t offset = 0;        // from the data section's start
  const uint8_t* data = nullptr;  // in the mapping
  uint64_t bytes = 0;
  int64_t numel() const;  // the product of dims (1 for none)
};

// A GGUF file, memory-mapped read-only and checked at open. Copies share the mapping.
class Reader {
 public:
  explicit Reader(const std::filesystem::path& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts in the file

  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }  // in file order
  const Value* find(std::string_view key) const;  // nullptr when absent

  // Typed getters. An absent key, or a value of another type, is an error naming the file, the key, the type
  // found and the type expected. The integer getters take any integer type whose value fits; get_float takes
  // Float32, Float64 and integers; get_bool only Bool; get_string only String.
  std::string get_string(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  // Arrays: of strings; of numbers (any integer or float type, as float); of integers (each fitting int64).
  // An empty array of any element type gives an empty vector.
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<float> get_floats(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;
  // The same with a fallback when the key is absent (present with a wrong type is still an error).
  std::string string_or(std::string_view key, std::string fallback) const;
  uint64_t uint_or(std::string_view key, uint64_t fallback) const;
  int64_t int_or(std::string_view key, int64_t fallback) const;
  double float_or(std::string_view key, double fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* tensor(std::string_view name) const;                // nullptr when absent

  const std::filesystem::path& path() const { return path_; }
  // Keeps the mapping alive for whoever uses tensor data (TensorInfo::data) past the Reader.
  std::shared_ptr<const void> mapping() const { return mapping_; }

 private:
  const Value& require(std::string_view key) const;
  [[noreturn]] void wrong_type(std::string_view key, const Value& v, std::string_view expected) const;

  std::filesystem::path path_;
  std::string origin_;  // path_ as text, for messages
  std::shared_ptr<const void> mapping_;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF file: metadata and tensors in the order given; write() lays them out and writes atomically.
// Tensor data is BORROWED by the pointer overload (it must stay valid until write() returns: a model's weights
// are not copied) and owned by the vector overload.
class Writer {
 public:
  // Sets `key` (a new key goes last; an existing one keeps its place and takes the new value). The value is
  // checked: array elements of the array's element type, nesting at most kMaxArrayDepth, integers inside
  // their type's range. general.alignment must be a uint32 power of two.
  void set(std::string key, Value value);
  void set_uint8(std::string key, uint8_t v) { set(std::move(key), Value::make_uint8(v)); }
  void set_int8(std::string key, int8_t v) { set(std::move(key), Value::make_int8(v)); }
  void set_uint16(std::string key, uint16_t v) { set(std::move(key), Value::make_uint16(v)); }
  void set_int16(std::string key, int16_t v) { set(std::move(key), Value::make_int16(v)); }
  void set_uint32(std::string key, uint32_t v) { set(std::move(key), Value::make_uint32(v)); }
  void set_int32(std::string key, int32_t v) { set(std::move(key), Value::make_int32(v)); }
  void set_uint64(std::string key, uint64_t v) { set(std::move(key), Value::make_uint64(v)); }
  void set_int64(std::string key, int64_t v) { set(std::move(key), Value::make_int64(v)); }
  void set_float32(std::string key, float v) { set(std::move(key), Value::make_float32(v)); }
  void set_float64(std::string key, double v) { set(std::move(key), Value::make_float64(v)); }
  void set_bool(std::string key, bool v) { set(std::move(key), Value::make_bool(v)); }
  void set_string(std::string key, std::string v) { set(std::move(key), Value::make_string(std::move(v))); }
  void set_strings(std::string key, const std::vector<std::string>& v);  // array of string
  void set_floats(std::string key, const std::vector<float>& v);         // array of float32
  void set_int32s(std::string key, const std::vector<int32_t>& v);       // array of int32
  void set_uint32s(std::string key, const std::vector<uint32_t>& v);     // array of uint32
  void set_int64s(std::string key, const std::vector<int64_t>& v);       // array of int64
  void set_bools(std::string key, const std::vector<bool>& v);           // array of bool

  // A tensor of ggml type `type` and `dims` (dims[0] the row length, at most 4): `bytes` must be what the type
  // and dims take (tensor_bytes), the name new and under 64 bytes (llama.cpp's GGML_MAX_NAME).
  void add_tensor(std::string name, std::vector<int64_t> dims, uint32_t type, const void* data, uint64_t bytes);
  void add_tensor(std::string name, std::vector<int64_t> dims, uint32_t type, std::vector<uint8_t> data);

  // Writes the file: header, metadata, tensor infos, zero padding to `alignment`, each tensor padded to it.
  // An alignment other than 32 is recorded as general.alignment (uint32) unless already set to it; a
  // general.alignment set to another value is an error. Temporary file, fsync, rename.
  void write(const std::filesystem::path& path, uint64_t alignment = kDefaultAlignment) const;

  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    const void* data;
    uint64_t bytes;
    std::shared_ptr<std::vector<uint8_t>> owned;  // the vector overload's copy
  };
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace attend::gguf
