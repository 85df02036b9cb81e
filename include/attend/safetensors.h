// safetensors: the weights file of Hugging Face's ecosystem, read and written.
//
//   8 bytes    N, the header's length (little-endian uint64)
//   N bytes    JSON: {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3],
//                                                          "data_offsets": [begin, end]}, ...}
//   the rest   tensor data, row-major, little-endian; offsets count from the first byte after the header
//
// Reading maps the file and checks everything before trusting it: the header lies inside the file,
// every tensor's offsets lie inside the data and match its dtype and shape, no two tensors overlap.
// F32, F16 and BF16 tensors load as float (converted); writing stores F32 or BF16/F16 (rounded to
// nearest even), with the header padded so the data starts 64-byte aligned. Files are written to a
// temporary name, flushed and renamed.
#pragma once

#include <attend/tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attend {

enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL };
std::string_view dtype_name(DType dtype);  // "F32", "BF16", ...
int dtype_size(DType dtype);               // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

// A whole file mapped private (MAP_PRIVATE), unmapped when the last shared_ptr to it goes: read-only, or
// writable with copy-on-write (writes never reach the file). An empty file has base nullptr. Errors name the file:
// it cannot be opened, is not a regular file, or cannot be mapped.
struct FileMapping {
  void* base = nullptr;
  size_t size = 0;
  FileMapping() = default;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();
};
enum class MapAccess { ReadOnly, CopyOnWrite };
std::shared_ptr<FileMapping> map_file(const std::filesystem::path& path, MapAccess access);
// A non-empty file, copy-on-write: loading hands a file's tensor data to a model this way, without a copy.
std::shared_ptr<FileMapping> map_private(const std::filesystem::path& path);
// Drops the whole pages of [data, data + bytes), in a read-only file mapping, from the process's resident set: a
// tensor read into a copy stops counting twice (read again, the pages come back from the file).
void release_pages(const void* data, size_t bytes);

class SafetensorsReader {
 public:
  // Maps `path` and validates its header. Errors name the file and the tensor or field at fault.
  explicit SafetensorsReader(const std::filesystem::path& path);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor called `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;

  // The tensor as float (F32, F16 or BF16 in the file). An unknown name or another dtype is an error.
  Tensor load(std::string_view name) const;
  // Loads into `out`, which must already have the tensor's shape (the error names both shapes).
  void load_into(std::string_view name, TensorView out) const;
  // Rows [row0, row0 + rows) of the tensor (along its first dimension) into `out`, as float: a large tensor a piece
  // at a time. The rows must lie inside the tensor.
  void load_rows_into(std::string_view name, int64_t row0, int64_t rows, float* out) const;

  const std::string& origin() const { return origin_; }
  // Where the data section starts in the file (8 + the header's length).
  uint64_t data_start() const { return static_cast<uint64_t>(data_ - static_cast<const unsigned char*>(map_->base)); }

 private:
  void read_rows(const TensorInfo& t, int64_t row0, int64_t rows, float* out) const;  // load_rows_into, found

  std::string origin_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* data_ = nullptr;  // the data section
  std::shared_ptr<FileMapping> map_;
};



struct NamedTensor {
  std::string name;
  const Tensor* tensor;
};

// Writes tensors (float) as `dtype` (F32, F16 or BF16), in the order given, with `metadata`.
void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, DType dtype = DType::F32);

}  // namespace attend
