#include <attend/error.h>
#include <attend/io.h>
#include <attend/safetensors.h>

#include "core/json_fields.h"
#include "kernels/convert.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

namespace attend {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
  int size;
};
constexpr DTypeName kDTypes[] = {{DType::F32, "F32", 4}, {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
                                 {DType::F64, "F64", 8}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
                                 {DType::I16, "I16", 2}, {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
                                 {DType::BOOL, "BOOL", 1}};

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // as Hugging Face's reader: headers over 100 MB are refused

}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

int dtype_size(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

SafetensorsReader::SafetensorsReader(const fs::path& path)
    : origin_(path.string()), map_(map_file(path, MapAccess::ReadOnly)) {
  const size_t size = map_->size;
  check(size >= 8, "{}: {} bytes is too short for a safetensors file (8-byte header length first)", origin_,
        size);
  const auto* bytes = static_cast<const unsigned char*>(map_->base);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  check(header_size <= kMaxHeader, "{}: header length {} is over the 100 MB limit (not a safetensors file?)", origin_,
        header_size);
  check(header_size <= size - 8, "{}: header length {} runs past the end of the file ({} bytes)", origin_,
        header_size, size);
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_size);
  check_json_depth(header, origin_ + ": header");
  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {  // a syntax error, or a number too large for a double
    throw Error(fmt::format("{}: header is not valid JSON: {}", origin_, e.what()));
  }
  check(j.is_object(), "{}: header is {}, expected a JSON object", origin_, j.type_name());
  data_ = bytes + 8 + header_size;
  const uint64_t data_size = size - 8 - header_size;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      check(entry.is_object(), "{}: __metadata__ is {}, expected an object of strings", origin_, entry.type_name());
      for (const auto& [k, v] : entry.items()) {
        check(v.is_string(), "{}: __metadata__[{:?}] is {}, expected a string", origin_, k, v.type_name());
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    check(entry.is_object(), "{}: tensor '{}' is {}, expected an object", origin_, name, entry.type_name());
    TensorInfo info;
    info.name = name;
    const auto dtype = entry.find("dtype");
    check(dtype != entry.end() && dtype->is_string(), "{}: tensor '{}' has no dtype string", origin_, name);
    bool known = false;
    for (const auto& d : kDTypes)
      if (d.name == dtype->get<std::string>()) {
        info.dtype = d.dtype;
        known = true;
      }
    check(known, "{}: tensor '{}' has dtype {}, expected F32, F16, BF16, F64, I64, I32, I16, I8, U8 or BOOL", origin_,
          name, dtype->dump());
    const auto shape = entry.find("shape");
    check(shape != entry.end() && shape->is_array() && shape->size() <= static_cast<size_t>(Shape::kMaxRank),
          "{}: tensor '{}' needs a shape of at most {} dimensions", origin_, name, Shape::kMaxRank);
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const json& d : *shape) {
      check(d.is_number_unsigned(), "{}: tensor '{}' has shape {}, expected non-negative integers", origin_, name,
            shape->dump());
      const uint64_t v = d.get<uint64_t>();
      check(v < (uint64_t{1} << 40) && (v == 0 || numel <= (uint64_t{1} << 50) / v),
            "{}: tensor '{}' has an impossible shape {}", origin_, name, shape->dump());
      numel *= v;
      dims.push_back(static_cast<int64_t>(v));
    }
    info.shape = Shape(std::span<const int64_t>(dims));
    const auto offsets = entry.find("data_offsets");
    check(offsets != entry.end() && offsets->is_array() && offsets->size() == 2 && (*offsets)[0].is_number_unsigned() &&
              (*offsets)[1].is_number_unsigned(),
          "{}: tensor '{}' needs data_offsets [begin, end]", origin_, name);
    info.begin = (*offsets)[0].get<uint64_t>();
    info.end = (*offsets)[1].get<uint64_t>();
    check(info.begin <= info.end && info.end <= data_size,
          "{}: tensor '{}' has data_offsets [{}, {}] outside the {} bytes of data (truncated file?)", origin_, name,
          info.begin, info.end, data_size);
    const uint64_t expected = numel * static_cast<uint64_t>(dtype_size(info.dtype));
    check(info.end - info.begin == expected, "{}: tensor '{}' ({} {}) needs {} bytes, its data_offsets give {}",
          origin_, name, dtype_name(info.dtype), info.shape, expected, info.end - info.begin);
    tensors_.push_back(std::move(info));
  }
  // Tensors must not overlap (they may come in any order in the JSON object).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    check(by_offset[i]->begin >= by_offset[i - 1]->end, "{}: tensors '{}' and '{}' overlap", origin_,
          by_offset[i - 1]->name, by_offset[i]->name);
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
}

FileMapping::~FileMapping() {
  if (base != nullptr) ::munmap(base, size);
}

std::shared_ptr<FileMapping> map_file(const fs::path& path, MapAccess access) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file", path.string()));
  }
  auto mapping = std::make_shared<FileMapping>();
  mapping->size = static_cast<size_t>(st.st_size);
  if (mapping->size == 0) {  // mmap refuses an empty range
    ::close(fd);
    return mapping;
  }
  // Private either way: a writable mapping's writes go to copies of the pages, never to the file.
  const int protection = access == MapAccess::CopyOnWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* base = ::mmap(nullptr, mapping->size, protection, MAP_PRIVATE, fd, 0);
  ::close(fd);
  check(base != MAP_FAILED, "{}: cannot map: {}", path.string(), std::strerror(errno));
  mapping->base = base;
  return mapping;
}

void release_pages(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::shared_ptr<FileMapping> map_private(const fs::path& path) {
  std::shared_ptr<FileMapping> mapping = map_file(path, MapAccess::CopyOnWrite);
  check(mapping->size > 0, "{}: not a regular, non-empty file", path.string());
  return mapping;
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsReader::load_into(std::string_view name, TensorView out) const {
  const TensorInfo* t = find(name);
  check(t != nullptr, "{}: no tensor '{}'", origin_, name);
  check(t->shape == out.shape(), "{}: tensor '{}' has shape {}, expected {}", origin_, name, t->shape, out.shape());
  read_rows(*t, 0, t->shape.rank() == 0 ? 1 : t->shape[0], out.data());
}

void SafetensorsReader::load_rows_into(std::string_view name, int64_t row0, int64_t rows, float* out) const {
  const TensorInfo* t = find(name);
  check(t != nullptr, "{}: no tensor '{}'", origin_, name);
  read_rows(*t, row0, rows, out);
}

void SafetensorsReader::read_rows(const TensorInfo& t, int64_t row0, int64_t rows, float* out) const {
  const int64_t all = t.shape.rank() == 0 ? 1 : t.shape[0];
  check(row0 >= 0 && rows >= 0 && row0 + rows <= all, "{}: rows [{}, {}) of tensor '{}' of shape {}", origin_, row0,
        row0 + rows, t.name, t.shape);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(fmt::format("{}: tensor '{}' has dtype {}, expected F32, F16 or BF16", origin_, t.name,
                            dtype_name(t.dtype)));
  const int64_t per_row = all == 0 ? 0 : t.shape.numel() / all;
  const auto n = static_cast<size_t>(rows * per_row);
  if (n == 0) return;  // nothing to copy
  const size_t element = static_cast<size_t>(dtype_size(t.dtype));
  const unsigned char* src = data_ + t.begin + static_cast<size_t>(row0 * per_row) * element;
  switch (t.dtype) {
    case DType::F32: std::memcpy(out, src, n * 4); break;
    case DType::BF16:
    case DType::F16: {
      std::vector<uint16_t> halves(n);  // the file's data need not be 2-byte aligned
      std::memcpy(halves.data(), src, n * 2);
      if (t.dtype == DType::BF16) kernels::bf16_to_float(out, halves.data(), static_cast<int64_t>(n));
      else kernels::half_to_float(out, halves.data(), static_cast<int64_t>(n));
      break;
    }
    default: break;
  }
  release_pages(src, n * element);  // read once, into `out`
}

Tensor SafetensorsReader::load(std::string_view name) const {
  const TensorInfo* t = find(name);
  check(t != nullptr, "{}: no tensor '{}'", origin_, name);
  Tensor out(t->shape);
  load_into(name, out.view());
  return out;
}

void write_safetensors(const fs::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype) {
  check(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
        "{}: tensors can be written as F32, F16 or BF16, not {}", path.string(), dtype_name(dtype));
  const uint64_t element = static_cast<uint64_t>(dtype_size(dtype));
  // nlohmann's ordered_json keeps the tensors in the order given (the data follows that order).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    check(names.insert(t.name).second, "{}: two tensors are called '{}'", path.string(), t.name);
    check(t.name != "__metadata__", "{}: a tensor cannot be called __metadata__", path.string());
    const uint64_t bytes = static_cast<uint64_t>(t.tensor->numel()) * element;
    header[t.name] = {{"dtype", dtype_name(dtype)},
                      {"shape", std::vector<int64_t>(t.tensor->shape().begin(), t.tensor->shape().end())},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces (the format allows them) so the data starts 64-byte aligned: a mapped file then hands its
  // tensors to the kernels on cache-line boundaries.
  text.append((64 - (8 + text.size()) % 64) % 64, ' ');
  std::string file(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  file += text;
  file.reserve(file.size() + offset);
  for (const NamedTensor& t : tensors) {
    const auto count = static_cast<size_t>(t.tensor->numel());
    const size_t at = file.size();
    file.resize(at + count * element);
    char* dst = file.data() + at;
    if (dtype == DType::F32) {
      std::memcpy(dst, t.tensor->data(), count * 4);
    } else if (dtype == DType::BF16) {
      std::vector<uint16_t> halves(count);
      kernels::float_to_bf16(halves.data(), t.tensor->data(), static_cast<int64_t>(count));
      std::memcpy(dst, halves.data(), count * 2);
    } else {
      std::vector<uint16_t> halves(count);
      kernels::float_to_half(halves.data(), t.tensor->data(), static_cast<int64_t>(count));
      std::memcpy(dst, halves.data(), count * 2);
    }
  }
  write_file_atomic(path, file);
}

}  // namespace attend
