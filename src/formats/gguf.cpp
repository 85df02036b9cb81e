#include "formats/gguf.h"

#include <attend/error.h>
#include <attend/safetensors.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

namespace attend::gguf {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "GGUF files are little-endian; this reader copies bytes as they are");

namespace {

// Checked against ggml.c's type_traits (blck_size, type_size = sizeof(block_*), compiled from ggml-common.h).
// gguf-py's GGML_QUANT_SIZES gives Q8_1 40 bytes (its old float scales); ggml's block_q8_1 has two fp16 and
// takes 36, which is what llama.cpp reads.
constexpr TypeTraits kTypes[] = {
    {tensor_type::F32, "f32", 1, 4},          {tensor_type::F16, "f16", 1, 2},
    {tensor_type::Q4_0, "q4_0", 32, 18},      {tensor_type::Q4_1, "q4_1", 32, 20},
    {tensor_type::Q5_0, "q5_0", 32, 22},      {tensor_type::Q5_1, "q5_1", 32, 24},
    {tensor_type::Q8_0, "q8_0", 32, 34},      {tensor_type::Q8_1, "q8_1", 32, 36},
    {tensor_type::Q2_K, "q2_K", 256, 84},     {tensor_type::Q3_K, "q3_K", 256, 110},
    {tensor_type::Q4_K, "q4_K", 256, 144},    {tensor_type::Q5_K, "q5_K", 256, 176},
    {tensor_type::Q6_K, "q6_K", 256, 210},    {tensor_type::Q8_K, "q8_K", 256, 292},
    {tensor_type::IQ2_XXS, "iq2_xxs", 256, 66}, {tensor_type::IQ2_XS, "iq2_xs", 256, 74},
    {tensor_type::IQ3_XXS, "iq3_xxs", 256, 98}, {tensor_type::IQ1_S, "iq1_s", 256, 50},
    {tensor_type::IQ4_NL, "iq4_nl", 32, 18},  {tensor_type::IQ3_S, "iq3_s", 256, 110},
    {tensor_type::IQ2_S, "iq2_s", 256, 82},   {tensor_type::IQ4_XS, "iq4_xs", 256, 136},
    {tensor_type::I8, "i8", 1, 1},            {tensor_type::I16, "i16", 1, 2},
    {tensor_type::I32, "i32", 1, 4},          {tensor_type::I64, "i64", 1, 8},
    {tensor_type::F64, "f64", 1, 8},          {tensor_type::IQ1_M, "iq1_m", 256, 56},
    {tensor_type::BF16, "bf16", 1, 2},        {tensor_type::TQ1_0, "tq1_0", 256, 54},
    {tensor_type::TQ2_0, "tq2_0", 256, 66},
};

constexpr const char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, tensor count, metadata count
// The fewest bytes an entry can take, to bound counts by the bytes left before anything is allocated.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, a one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset
constexpr size_t kMaxNameBytes = 64;                      // llama.cpp's GGML_MAX_NAME, with its NUL

// The bytes one element of `type` takes at the least (strings and arrays: their length fields).
uint64_t min_value_bytes(ValueType type) {
  switch (type) {
    case ValueType::UInt8:
    case ValueType::Int8:
    case ValueType::Bool: return 1;
    case ValueType::UInt16:
    case ValueType::Int16: return 2;
    case ValueType::UInt32:
    case ValueType::Int32:
    case ValueType::Float32: return 4;
    case ValueType::UInt64:
    case ValueType::Int64:
    case ValueType::Float64:
    case ValueType::String: return 8;
    case ValueType::Array: return 4 + 8;
  }
  return 1;
}

bool known(ValueType type) { return static_cast<uint32_t>(type) <= static_cast<uint32_t>(ValueType::Float64); }

bool is_unsigned(ValueType t) {
  return t == ValueType::UInt8 || t == ValueType::UInt16 || t == ValueType::UInt32 || t == ValueType::UInt64;
}

std::string dims_text(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

// Reads the file front to back; every read checks the bytes left and names what it was reading.
class Cursor {
 public:
  Cursor(const std::string& origin, const uint8_t* bytes, uint64_t size) : origin_(origin), bytes_(bytes), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  const uint8_t* take(uint64_t n, std::string_view what) {
    check(n <= left(), "{}: truncated: {} needs {} bytes at byte {}, {} are left (the file has {})", origin_, what, n,
          pos_, left(), size_);
    const uint8_t* at = bytes_ + pos_;
    pos_ += n;
    return at;
  }
  template <typename T>
  T read(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string read_string(std::string_view what) {
    const auto n = read<uint64_t>(what);
    check(n <= left(), "{}: {} is a string of {} bytes, longer than the {} bytes left in the file (at byte {})",
          origin_, what, n, left(), pos_);
    const uint8_t* at = take(n, what);
    return std::string(reinterpret_cast<const char*>(at), static_cast<size_t>(n));
  }

 private:
  const std::string& origin_;
  const uint8_t* bytes_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// One value of `type`; `what` names the key ("key 'general.name'") for messages. `elements` counts the array
// elements read so far in the file, against kMaxArrayElements.
Value read_value(Cursor& in, const std::string& origin, ValueType type, int depth, const std::string& what,
                 uint64_t& elements) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::UInt8: v.u = in.read<uint8_t>(what); break;
    case ValueType::Int8: v.i = in.read<int8_t>(what); break;
    case ValueType::UInt16: v.u = in.read<uint16_t>(what); break;
    case ValueType::Int16: v.i = in.read<int16_t>(what); break;
    case ValueType::UInt32: v.u = in.read<uint32_t>(what); break;
    case ValueType::Int32: v.i = in.read<int32_t>(what); break;
    case ValueType::UInt64: v.u = in.read<uint64_t>(what); break;
    case ValueType::Int64: v.i = in.read<int64_t>(what); break;
    case ValueType::Float32: v.f = in.read<float>(what); break;
    case ValueType::Float64: v.f = in.read<double>(what); break;
    case ValueType::Bool: {
      const auto byte = in.read<uint8_t>(what);
      check(byte <= 1, "{}: {} holds a bool byte {} at byte {}, expected 0 or 1", origin, what, byte, in.pos() - 1);
      v.b = byte == 1;
      break;
    }
    case ValueType::String: v.s = in.read_string(what); break;
    case ValueType::Array: {
      check(depth < kMaxArrayDepth, "{}: {} nests arrays more than {} deep", origin, what, kMaxArrayDepth);
      const auto element = in.read<uint32_t>(what);
      check(known(ValueType{element}), "{}: {} is an array of value type {}, expected a GGUF value type (0 to 12)",
            origin, what, element);
      v.element_type = ValueType{element};
      const auto n = in.read<uint64_t>(what);
      check(n <= kMaxArrayElements - elements,
            "{}: {} is an array of {} {}, past the {} array elements a file may hold in all ({} before it)", origin,
            what, n, value_type_name(v.element_type), kMaxArrayElements, elements);
      elements += n;
      const uint64_t fit = in.left() / min_value_bytes(v.element_type);
      check(n <= fit, "{}: {} is an array of {} {}, more than the {} bytes left in the file could hold", origin, what,
            n, value_type_name(v.element_type), in.left());
      v.array.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(in, origin, v.element_type, depth + 1, what, elements));
      break;
    }
    default:
      throw Error(fmt::format("{}: {} has value type {}, expected a GGUF value type (0 to 12)", origin, what,
                              static_cast<uint32_t>(type)));
  }
  return v;
}

// The range an integer type holds, for the Writer's checks.
bool fits(const Value& v) {
  switch (v.type) {
    case ValueType::UInt8: return v.u <= std::numeric_limits<uint8_t>::max();
    case ValueType::UInt16: return v.u <= std::numeric_limits<uint16_t>::max();
    case ValueType::UInt32: return v.u <= std::numeric_limits<uint32_t>::max();
    case ValueType::Int8: return v.i >= INT8_MIN && v.i <= INT8_MAX;
    case ValueType::Int16: return v.i >= INT16_MIN && v.i <= INT16_MAX;
    case ValueType::Int32: return v.i >= INT32_MIN && v.i <= INT32_MAX;
    default: return true;
  }
}

void check_value(const std::string& key, const Value& v, int depth) {
  check(known(v.type), "gguf writer: key '{}' has value type {}, expected a GGUF value type (0 to 12)", key,
        static_cast<uint32_t>(v.type));
  if (!fits(v))
    throw Error(fmt::format("gguf writer: key '{}' holds {} {}, outside the type's range", key, value_type_name(v.type),
                            is_unsigned(v.type) ? std::to_string(v.u) : std::to_string(v.i)));
  if (v.type != ValueType::Array) return;
  check(depth < kMaxArrayDepth, "gguf writer: key '{}' nests arrays more than {} deep", key, kMaxArrayDepth);
  check(known(v.element_type), "gguf writer: key '{}' is an array of value type {}, expected a GGUF value type",
        key, static_cast<uint32_t>(v.element_type));
  for (size_t k = 0; k < v.array.size(); ++k) {
    check(v.array[k].type == v.element_type, "gguf writer: key '{}' is an array of {}, but element {} is {}", key,
          value_type_name(v.element_type), k, value_type_name(v.array[k].type));
    check_value(key, v.array[k], depth + 1);
  }
}

template <typename T>
void put(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

void put_value(std::string& out, const Value& v) {
  switch (v.type) {
    case ValueType::UInt8: put(out, static_cast<uint8_t>(v.u)); break;
    case ValueType::Int8: put(out, static_cast<int8_t>(v.i)); break;
    case ValueType::UInt16: put(out, static_cast<uint16_t>(v.u)); break;
    case ValueType::Int16: put(out, static_cast<int16_t>(v.i)); break;
    case ValueType::UInt32: put(out, static_cast<uint32_t>(v.u)); break;
    case ValueType::Int32: put(out, static_cast<int32_t>(v.i)); break;
    case ValueType::UInt64: put(out, v.u); break;
    case ValueType::Int64: put(out, v.i); break;
    case ValueType::Float32: put(out, static_cast<float>(v.f)); break;
    case ValueType::Float64: put(out, v.f); break;
    case ValueType::Bool: put<uint8_t>(out, v.b ? 1 : 0); break;
    case ValueType::String: put_string(out, v.s); break;
    case ValueType::Array:
      put(out, static_cast<uint32_t>(v.element_type));
      put<uint64_t>(out, v.array.size());
      for (const Value& e : v.array) put_value(out, e);
      break;
  }
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

bool power_of_two(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

// A file written under a temporary name beside the target and renamed over it by commit(); removed when
// commit() is never reached. Streams, so a model's tensors go to disk without a copy of the whole file.
class AtomicFile {
 public:
  explicit AtomicFile(const fs::path& path)
      : path_(path), tmp_(fs::path(path).concat(fmt::format(".tmp.{}", ::getpid()))) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    // The target named first; a missing directory said as such (the temporary name alone was what the message named).
    check(fd_ >= 0 || errno != ENOENT, "{}: cannot write it: the directory {} does not exist", path_.string(),
          fs::absolute(path_).parent_path().string());
    check(fd_ >= 0, "{}: cannot write it: {}", path_.string(), std::strerror(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n) {
    const auto* p = static_cast<const char*>(data);
    for (uint64_t done = 0; done < n;) {
      const ssize_t w = ::write(fd_, p + done, static_cast<size_t>(std::min<uint64_t>(n - done, 1u << 30)));
      if (w < 0 && errno == EINTR) continue;
      check(w > 0, "{}: write failed: {}", path_.string(), std::strerror(errno));
      done += static_cast<uint64_t>(w);
    }
  }
  void commit() {
    check(::fsync(fd_) == 0, "{}: fsync failed: {}", path_.string(), std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const std::string reason = std::strerror(errno);
      ::unlink(tmp_.c_str());
      throw Error(fmt::format("{}: close failed: {}", path_.string(), reason));
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const std::string reason = std::strerror(errno);
      ::unlink(tmp_.c_str());
      throw Error(fmt::format("{}: cannot rename {} into place: {}", path_.string(), tmp_.string(), reason));
    }
  }

 private:
  fs::path path_, tmp_;
  int fd_ = -1;
};

}  // namespace

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UInt8: return "uint8";
    case ValueType::Int8: return "int8";
    case ValueType::UInt16: return "uint16";
    case ValueType::Int16: return "int16";
    case ValueType::UInt32: return "uint32";
    case ValueType::Int32: return "int32";
    case ValueType::Float32: return "float32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::UInt64: return "uint64";
    case ValueType::Int64: return "int64";
    case ValueType::Float64: return "float64";
  }
  return "unknown";
}

bool is_integer(ValueType t) {
  return is_unsigned(t) || t == ValueType::Int8 || t == ValueType::Int16 || t == ValueType::Int32 ||
         t == ValueType::Int64;
}

bool is_float(ValueType t) { return t == ValueType::Float32 || t == ValueType::Float64; }

Value Value::make_uint8(uint8_t v) { return {.type = ValueType::UInt8, .u = v}; }
Value Value::make_int8(int8_t v) { return {.type = ValueType::Int8, .i = v}; }
Value Value::make_uint16(uint16_t v) { return {.type = ValueType::UInt16, .u = v}; }
Value Value::make_int16(int16_t v) { return {.type = ValueType::Int16, .i = v}; }
Value Value::make_uint32(uint32_t v) { return {.type = ValueType::UInt32, .u = v}; }
Value Value::make_int32(int32_t v) { return {.type = ValueType::Int32, .i = v}; }
Value Value::make_uint64(uint64_t v) { return {.type = ValueType::UInt64, .u = v}; }
Value Value::make_int64(int64_t v) { return {.type = ValueType::Int64, .i = v}; }
Value Value::make_float32(float v) { return {.type = ValueType::Float32, .f = v}; }
Value Value::make_float64(double v) { return {.type = ValueType::Float64, .f = v}; }
Value Value::make_bool(bool v) { return {.type = ValueType::Bool, .b = v}; }
Value Value::make_string(std::string v) { return {.type = ValueType::String, .s = std::move(v)}; }
Value Value::make_array(ValueType element_type, std::vector<Value> elements) {
  return {.type = ValueType::Array, .element_type = element_type, .array = std::move(elements)};
}

std::string describe(const Value& v) {
  switch (v.type) {
    case ValueType::String: return "a string";
    case ValueType::Array:
      return fmt::format("an array of {} {}", v.array.size(), value_type_name(v.element_type));
    case ValueType::Bool: return fmt::format("bool {}", v.b);
    case ValueType::Float32:
    case ValueType::Float64: return fmt::format("{} {}", value_type_name(v.type), v.f);
    default:
      if (is_unsigned(v.type)) return fmt::format("{} {}", value_type_name(v.type), v.u);
      if (is_integer(v.type)) return fmt::format("{} {}", value_type_name(v.type), v.i);
      return fmt::format("value type {}", static_cast<uint32_t>(v.type));
  }
}

const TypeTraits* type_traits(uint32_t id) {
  for (const TypeTraits& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const TypeTraits* type_traits_by_name(std::string_view name) {
  for (const TypeTraits& t : kTypes)
    if (name == t.name) return &t;
  return nullptr;
}

std::optional<uint64_t> tensor_bytes(uint32_t type, const std::vector<int64_t>& dims) {
  const TypeTraits* t = type_traits(type);
  if (t == nullptr || dims.size() > static_cast<size_t>(kMaxDims)) return std::nullopt;
  int64_t numel = 1;
  for (int64_t d : dims)
    if (d <= 0 || __builtin_mul_overflow(numel, d, &numel)) return std::nullopt;
  const int64_t row = dims.empty() ? 1 : dims[0];
  if (row % t->block != 0) return std::nullopt;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel / t->block), static_cast<uint64_t>(t->bytes), &bytes))
    return std::nullopt;
  return bytes;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Reader::Reader(const fs::path& path) : path_(path), origin_(path.string()) {
  const std::shared_ptr<FileMapping> file = map_file(path, MapAccess::ReadOnly);
  size_ = static_cast<uint64_t>(file->size);
  check(size_ >= kHeaderBytes, "{}: truncated: {} bytes, a GGUF header takes {} (magic, version and two counts)",
        origin_, size_, kHeaderBytes);
  mapping_ = std::shared_ptr<const void>(file, file->base);  // keeps the mapping; points at its bytes
  const auto* bytes = static_cast<const uint8_t*>(file->base);
  Cursor in(origin_, bytes, size_);

  const uint8_t* magic = in.take(4, "the magic");
  check(std::memcmp(magic, kMagic, 4) == 0, "{}: starts with {:?}, expected the magic \"GGUF\" (not a GGUF file)",
        origin_, std::string_view(reinterpret_cast<const char*>(magic), 4));
  version_ = in.read<uint32_t>("the version");
  check(version_ != 1, "{}: GGUF version 1 (32-bit counts) is not supported, expected version 2 or 3", origin_);
  check(version_ == 2 || version_ == 3, "{}: GGUF version {}{}, expected 2 or 3", origin_, version_,
        (version_ == 0x02000000 || version_ == 0x03000000) ? " (a big-endian file?)" : "");
  const auto n_tensors = in.read<uint64_t>("the tensor count");
  const auto n_kv = in.read<uint64_t>("the metadata count");
  // Bounds the counts before anything is allocated: each entry takes some bytes at the least.
  check(n_kv <= in.left() / kMinKvBytes && n_tensors <= in.left() / kMinTensorInfoBytes &&
            n_kv * kMinKvBytes <= in.left() - n_tensors * kMinTensorInfoBytes,
        "{}: the header counts {} tensors and {} metadata keys, more than the {} bytes after it could hold", origin_,
        n_tensors, n_kv, in.left());

  metadata_.reserve(static_cast<size_t>(n_kv));
  uint64_t elements = 0;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = in.read_string(fmt::format("the key of metadata entry {}", k));
    const std::string what = fmt::format("key '{}'", key);
    check(!key_index_.contains(key), "{}: duplicate key '{}' (entries {} and {})", origin_, key,
          key_index_.contains(key) ? key_index_.find(key)->second : 0, k);
    const auto type = in.read<uint32_t>(what);
    check(known(ValueType{type}), "{}: {} has value type {}, expected a GGUF value type (0 to 12)", origin_, what, type);
    Value value = read_value(in, origin_, ValueType{type}, 0, what, elements);
    key_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const Value* a = find(kAlignmentKey)) {
    check(a->type == ValueType::UInt32, "{}: {} is {}, expected a uint32", origin_, kAlignmentKey, describe(*a));
    check(power_of_two(a->u), "{}: {} is {}, expected a power of two", origin_, kAlignmentKey, a->u);
    alignment_ = a->u;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    t.name = in.read_string(fmt::format("the name of tensor {}", k));
    const std::string what = fmt::format("tensor '{}'", t.name);
    check(!tensor_index_.contains(t.name), "{}: duplicate tensor name '{}' (tensors {} and {})", origin_, t.name,
          tensor_index_.contains(t.name) ? tensor_index_.find(t.name)->second : 0, k);
    const auto n_dims = in.read<uint32_t>(what);
    check(n_dims <= static_cast<uint32_t>(kMaxDims), "{}: {} has {} dimensions, expected at most {} (GGML_MAX_DIMS)",
          origin_, what, n_dims, kMaxDims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto n = in.read<int64_t>(what);
      t.dims.push_back(n);
      check(n > 0, "{}: {} has dimension {} of size {}, expected a positive size", origin_, what, d, n);
      if (__builtin_mul_overflow(numel, n, &numel))
        throw Error(fmt::format("{}: {} has dimensions {} whose product overflows int64", origin_, what,
                                dims_text(t.dims)));
    }
    t.type = in.read<uint32_t>(what);
    const TypeTraits* traits = type_traits(t.type);
    check(traits != nullptr, "{}: {} has ggml type {}, not one of the types GGUF files hold (0-3, 6-30, 34, 35)",
          origin_, what, t.type);
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % traits->block != 0)
      throw Error(fmt::format("{}: {} ({} {}) has rows of {} elements, not a multiple of {}'s block of {}", origin_,
                              what, traits->name, dims_text(t.dims), row, traits->name, traits->block));
    const std::optional<uint64_t> bytes = tensor_bytes(t.type, t.dims);
    if (!bytes)
      throw Error(fmt::format("{}: {} ({} {}) needs 2^64 bytes or more", origin_, what, traits->name,
                              dims_text(t.dims)));
    t.bytes = *bytes;
    t.offset = in.read<uint64_t>(what);
    check(t.offset % alignment_ == 0, "{}: {} has offset {}, not a multiple of the alignment {}", origin_, what,
          t.offset, alignment_);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment; a file of no tensors may end before it.
  data_offset_ = align_up(in.pos(), alignment_);
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  uint64_t end = 0;
  const TensorInfo* previous = nullptr;
  for (TensorInfo& t : tensors_) {
    check(t.bytes <= data_size && t.offset <= data_size - t.bytes,
          "{}: tensor '{}' ({} bytes at offset {}) runs past the end of the file: its data section (from byte {}) "
          "holds {} bytes (truncated?)",
          origin_, t.name, t.bytes, t.offset, data_offset_, data_size);
    check(t.offset >= end, "{}: tensor '{}' (offsets {} to {}) overlaps the tensor before it, '{}' (up to {})",
          origin_, t.name, t.offset, t.offset + t.bytes, previous ? previous->name : "", end);
    t.data = bytes + data_offset_ + t.offset;
    end = t.offset + t.bytes;
    previous = &t;
  }
}

const Value* Reader::find(std::string_view key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* Reader::tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const Value& Reader::require(std::string_view key) const {
  const Value* v = find(key);
  check(v != nullptr, "{}: no key '{}'", origin_, key);
  return *v;
}

void Reader::wrong_type(std::string_view key, const Value& v, std::string_view expected) const {
  throw Error(fmt::format("{}: key '{}' is {}, expected {}", origin_, key, describe(v), expected));
}

namespace {

// An integer value as uint64 / int64 when it fits.
std::optional<uint64_t> as_uint(const Value& v) {
  if (is_unsigned(v.type)) return v.u;
  if (is_integer(v.type) && v.i >= 0) return static_cast<uint64_t>(v.i);
  return std::nullopt;
}
std::optional<int64_t> as_int(const Value& v) {
  if (is_unsigned(v.type) && v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.u);
  if (is_integer(v.type) && !is_unsigned(v.type)) return v.i;
  return std::nullopt;
}
std::optional<double> as_float(const Value& v) {
  if (is_float(v.type)) return v.f;
  if (is_unsigned(v.type)) return static_cast<double>(v.u);
  if (is_integer(v.type)) return static_cast<double>(v.i);
  return std::nullopt;
}

}  // namespace

std::string Reader::get_string(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::String) wrong_type(key, v, "a string");
  return v.s;
}

uint64_t Reader::get_uint(std::string_view key) const {
  const Value& v = require(key);
  const auto n = as_uint(v);
  if (!n) wrong_type(key, v, "a non-negative integer");
  return *n;
}

int64_t Reader::get_int(std::string_view key) const {
  const Value& v = require(key);
  const auto n = as_int(v);
  if (!n) wrong_type(key, v, "an integer that fits int64");
  return *n;
}

double Reader::get_float(std::string_view key) const {
  const Value& v = require(key);
  const auto x = as_float(v);
  if (!x) wrong_type(key, v, "a number");
  return *x;
}

bool Reader::get_bool(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::Bool) wrong_type(key, v, "a bool");
  return v.b;
}

std::vector<std::string> Reader::get_strings(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::Array || (v.element_type != ValueType::String && !v.array.empty()))
    wrong_type(key, v, "an array of string");
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const Value& e : v.array) out.push_back(e.s);
  return out;
}

std::vector<float> Reader::get_floats(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::Array ||
      (!is_float(v.element_type) && !is_integer(v.element_type) && !v.array.empty()))
    wrong_type(key, v, "an array of numbers");
  std::vector<float> out;
  out.reserve(v.array.size());
  for (const Value& e : v.array) out.push_back(static_cast<float>(*as_float(e)));
  return out;
}

std::vector<int64_t> Reader::get_ints(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::Array || (!is_integer(v.element_type) && !v.array.empty()))
    wrong_type(key, v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v.array.size());
  for (size_t k = 0; k < v.array.size(); ++k) {
    const auto n = as_int(v.array[k]);
    check(n.has_value(), "{}: key '{}' holds uint64 {} at index {}, expected integers that fit int64", origin_, key,
          v.array[k].u, k);
    out.push_back(*n);
  }
  return out;
}

std::string Reader::string_or(std::string_view key, std::string fallback) const {
  return find(key) ? get_string(key) : std::move(fallback);
}
uint64_t Reader::uint_or(std::string_view key, uint64_t fallback) const { return find(key) ? get_uint(key) : fallback; }
int64_t Reader::int_or(std::string_view key, int64_t fallback) const { return find(key) ? get_int(key) : fallback; }
double Reader::float_or(std::string_view key, double fallback) const { return find(key) ? get_float(key) : fallback; }
bool Reader::bool_or(std::string_view key, bool fallback) const { return find(key) ? get_bool(key) : fallback; }

void Writer::set(std::string key, Value value) {
  check_value(key, value, 0);
  if (key == kAlignmentKey)
    check(value.type == ValueType::UInt32 && power_of_two(value.u), "gguf writer: {} is {}, expected a uint32 power of two",
          kAlignmentKey, describe(value));
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(std::move(key), std::move(value));
}

namespace {
template <typename T, typename Make>
Value array_of(ValueType type, const std::vector<T>& values, Make make) {
  std::vector<Value> elements;
  elements.reserve(values.size());
  for (const T& x : values) elements.push_back(make(x));
  return Value::make_array(type, std::move(elements));
}
}  // namespace

void Writer::set_strings(std::string key, const std::vector<std::string>& v) {
  set(std::move(key), array_of(ValueType::String, v, [](const std::string& s) { return Value::make_string(s); }));
}
void Writer::set_floats(std::string key, const std::vector<float>& v) {
  set(std::move(key), array_of(ValueType::Float32, v, Value::make_float32));
}
void Writer::set_int32s(std::string key, const std::vector<int32_t>& v) {
  set(std::move(key), array_of(ValueType::Int32, v, Value::make_int32));
}
void Writer::set_uint32s(std::string key, const std::vector<uint32_t>& v) {
  set(std::move(key), array_of(ValueType::UInt32, v, Value::make_uint32));
}
void Writer::set_int64s(std::string key, const std::vector<int64_t>& v) {
  set(std::move(key), array_of(ValueType::Int64, v, Value::make_int64));
}
void Writer::set_bools(std::string key, const std::vector<bool>& v) {
  std::vector<Value> elements;
  for (bool b : v) elements.push_back(Value::make_bool(b));
  set(std::move(key), Value::make_array(ValueType::Bool, std::move(elements)));
}

void Writer::add_tensor(std::string name, std::vector<int64_t> dims, uint32_t type, const void* data, uint64_t bytes) {
  check(!name.empty() && name.size() < kMaxNameBytes, "gguf writer: tensor name '{}' has {} bytes, expected 1 to {}",
        name, name.size(), kMaxNameBytes - 1);
  for (const Tensor& t : tensors_) check(t.name != name, "gguf writer: two tensors are called '{}'", name);
  const TypeTraits* traits = type_traits(type);
  check(traits != nullptr, "gguf writer: tensor '{}' has ggml type {}, not a type GGUF files hold", name, type);
  check(dims.size() <= static_cast<size_t>(kMaxDims), "gguf writer: tensor '{}' has {} dimensions, expected at most {}",
        name, dims.size(), kMaxDims);
  const std::optional<uint64_t> expected = tensor_bytes(type, dims);
  if (!expected)
    throw Error(fmt::format("gguf writer: tensor '{}' ({} {}) needs positive dimensions and rows a multiple of "
                            "{}'s block of {}", name, traits->name, dims_text(dims), traits->name, traits->block));
  if (bytes != *expected)
    throw Error(fmt::format("gguf writer: tensor '{}' ({} {}) takes {} bytes, {} given", name, traits->name,
                            dims_text(dims), *expected, bytes));
  check(data != nullptr, "gguf writer: tensor '{}' has no data", name);
  tensors_.push_back({std::move(name), std::move(dims), type, data, bytes, nullptr});
}

void Writer::add_tensor(std::string name, std::vector<int64_t> dims, uint32_t type, std::vector<uint8_t> data) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(data));
  add_tensor(std::move(name), std::move(dims), type, owned->data(), owned->size());
  tensors_.back().owned = std::move(owned);
}

void Writer::write(const fs::path& path, uint64_t alignment) const {
  check(power_of_two(alignment) && alignment <= std::numeric_limits<uint32_t>::max(),
        "{}: alignment {}, expected a power of two that fits uint32", path.string(), alignment);
  std::vector<std::pair<std::string, Value>> metadata = metadata_;
  bool recorded = false;
  for (const auto& [k, v] : metadata)
    if (k == kAlignmentKey) {
      check(v.u == alignment, "{}: {} is set to {}, but the file is written with alignment {}", path.string(),
            kAlignmentKey, v.u, alignment);
      recorded = true;
    }
  if (!recorded && alignment != kDefaultAlignment)
    metadata.emplace_back(kAlignmentKey, Value::make_uint32(static_cast<uint32_t>(alignment)));

  std::string header;
  header.append(kMagic, 4);
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_string(header, key);
    put(header, static_cast<uint32_t>(value.type));
    put_value(header, value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put(header, d);
    put(header, t.type);
    put(header, offset);
    offset = align_up(offset + t.bytes, alignment);
  }
  header.resize(align_up(header.size(), alignment), '\0');

  AtomicFile file(path);
  file.write(header.data(), header.size());
  static constexpr char kZeros[4096] = {};
  for (const Tensor& t : tensors_) {
    file.write(t.data, t.bytes);
    for (uint64_t pad = align_up(t.bytes, alignment) - t.bytes; pad > 0;) {
      const uint64_t n = std::min<uint64_t>(pad, sizeof(kZeros));
      file.write(kZeros, n);
      pad -= n;
    }
  }
  file.commit();
}

}  // namespace attend::gguf
