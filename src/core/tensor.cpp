#include <attend/error.h>
#include <attend/tensor.h>

#include "kernels/elementwise.h"

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include <sys/mman.h>
#include <unistd.h>

namespace attend {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  check(dims.size() <= kMaxRank, "a shape has at most {} dimensions, got {}", kMaxRank, dims.size());
  for (int64_t d : dims) check(d >= 0, "shape dimensions must be non-negative, got {}", d);
  std::copy(dims.begin(), dims.end(), dims_.begin());
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::operator[](int i) const {
  int j = i < 0 ? i + rank_ : i;
  check(j >= 0 && j < rank_, "dimension {} out of range for shape {}", i, str());
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  return rank_ == other.rank_ && std::equal(begin(), end(), other.begin());
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(begin(), end(), ", ")); }

TensorView TensorView::row(int64_t i) const {
  check(shape_.rank() >= 1 && i >= 0 && i < shape_[0], "row {} out of range for shape {}", i, shape_);
  Shape rest(std::span<const int64_t>(shape_.begin() + 1, shape_.end()));
  return {data_ + i * rest.numel(), rest};
}

TensorView TensorView::reshaped(Shape shape) const {
  check(shape.numel() == numel(), "cannot view shape {} as {}: element counts {} and {} differ", shape_,
        shape, numel(), shape.numel());
  return {data_, shape};
}

namespace {

// Freed blocks of at least kCachedBytes, by exact size. AddressSanitizer builds keep nothing, so that a
// use after free of a large tensor is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kKeepBlocks = false;
#else
constexpr bool kKeepBlocks = true;
#endif
constexpr size_t kCachedBytes = size_t{1} << 20;

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{8} << 30;
}

struct BlockCache {
  std::mutex mutex;
  std::unordered_multimap<size_t, void*> blocks;
  size_t bytes = 0;
  size_t limit = physical_memory_bytes() / 4;

  void* take(size_t size) {
    std::lock_guard lock(mutex);
    const auto it = blocks.find(size);
    if (it == blocks.end()) return nullptr;
    void* p = it->second;
    blocks.erase(it);
    bytes -= size;
    return p;
  }
  void put(void* p, size_t size) {
    std::lock_guard lock(mutex);
    if (size > limit) {
      std::free(p);
      return;
    }
    while (bytes + size > limit) {  // make room: blocks of other sizes are the likeliest to stay unused
      auto victim = blocks.begin();
      for (auto it = blocks.begin(); it != blocks.end(); ++it)
        if (it->first != size) {
          victim = it;
          break;
        }
      std::free(victim->second);
      bytes -= victim->first;
      blocks.erase(victim);
    }
    blocks.emplace(size, p);
    bytes += size;
  }
  void release() {
    std::lock_guard lock(mutex);
    for (auto& [size, p] : blocks) std::free(p);
    blocks.clear();
    bytes = 0;
  }
  ~BlockCache() { release(); }
};

BlockCache& cache() {
  static BlockCache c;
  return c;
}

}  // namespace

void release_cached_memory() { cache().release(); }

void set_cached_memory_limit(int64_t bytes) {
  check(bytes >= 0, "set_cached_memory_limit: {} bytes is negative", bytes);
  BlockCache& c = cache();
  bool over = false;
  {
    std::lock_guard lock(c.mutex);
    c.limit = static_cast<size_t>(bytes);
    over = c.bytes > c.limit;
  }
  if (over) c.release();
}
int64_t cached_memory_limit() {
  std::lock_guard lock(cache().mutex);
  return static_cast<int64_t>(cache().limit);
}
int64_t cached_memory_bytes() {
  std::lock_guard lock(cache().mutex);
  return static_cast<int64_t>(cache().bytes);
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
size_t weight_alignment(size_t bytes) { return bytes >= kHugePage ? kHugePage : 64; }
}  // namespace

void* allocate_weights(size_t bytes) {
  const size_t alignment = weight_alignment(bytes);
  const size_t rounded = std::max<size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
  void* p = ::operator new(rounded, std::align_val_t{alignment});
  // Before the first write: the pages are then faulted in as huge ones where the kernel has them to give.
  if (alignment == kHugePage) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void free_weights(void* p, size_t bytes) { ::operator delete(p, std::align_val_t{weight_alignment(bytes)}); }

void Tensor::FreeDeleter::operator()(float* p) const {
  if (from == From::Borrowed) return;
  if (from == From::Weights)
    free_weights(p, bytes);
  else if (kKeepBlocks && bytes >= kCachedBytes)
    cache().put(p, bytes);
  else
    std::free(p);
}

Tensor::Tensor(Shape shape, Uninitialized) : shape_(shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);  // aligned_alloc wants a multiple
  const bool kept = kKeepBlocks && rounded >= kCachedBytes;
  void* p = kept ? cache().take(rounded) : nullptr;
  if (p == nullptr) p = std::aligned_alloc(64, rounded);
  if (p == nullptr && kept) {  // give the kept blocks back and try once more
    cache().release();
    p = std::aligned_alloc(64, rounded);
  }
  check(p != nullptr, "out of memory allocating a tensor of shape {} ({} bytes)", shape, bytes);
  storage_ = std::unique_ptr<float[], FreeDeleter>(static_cast<float*>(p), FreeDeleter{rounded});
}

Tensor::Tensor(Shape shape) : Tensor(shape, Uninitialized{}) { zero(); }

Tensor::Tensor(Shape shape, std::span<const float> values) : Tensor(shape) {
  check(static_cast<int64_t>(values.size()) == shape.numel(), "tensor of shape {} needs {} values, got {}",
        shape, shape.numel(), values.size());
  std::copy(values.begin(), values.end(), data());
}

Tensor Tensor::borrowing(float* data, Shape shape) {
  Tensor t;
  t.shape_ = shape;
  t.storage_ = std::unique_ptr<float[], FreeDeleter>(data, FreeDeleter{0, FreeDeleter::From::Borrowed});
  return t;
}

Tensor Tensor::uninitialized_weights(Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  Tensor t;
  t.shape_ = shape;
  t.storage_ = std::unique_ptr<float[], FreeDeleter>(static_cast<float*>(allocate_weights(bytes)),
                                                     FreeDeleter{bytes, FreeDeleter::From::Weights});
  return t;
}

Tensor Tensor::weights(Shape shape) {
  Tensor t = uninitialized_weights(shape);
  t.zero();
  return t;
}

Tensor Tensor::full(Shape shape, float value) {
  Tensor t(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, Uninitialized{});
  if (numel() > 0) std::memcpy(t.data(), data(), static_cast<size_t>(numel()) * sizeof(float));
  return t;
}

void Tensor::reshape(Shape shape) {
  check(shape.numel() == numel(), "cannot reshape {} to {}: element counts {} and {} differ", shape_,
        shape, numel(), shape.numel());
  shape_ = shape;
}

void Tensor::fill(float value) { kernels::fill(data(), numel(), value); }

void check_same_shape(const Shape& a, const Shape& b, const char* what) {
  check(a == b, "{}: shapes {} and {} differ", what, a, b);  // formatted only on failure
}

}  // namespace attend
