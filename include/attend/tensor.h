// Shape, Tensor (owning) and TensorView (borrowing).
//
// A Tensor owns one contiguous, 64-byte aligned, row-major float buffer. It is move-only: copies are
// explicit (`clone()`), so a large buffer is never duplicated by accident. A TensorView is a pointer
// and a shape into storage someone else owns; it never frees anything.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace attend {

// Memory for the matrices the decoding kernels stream. On 64-byte boundaries, so that no vector load of a row
// straddles two cache lines (std::allocator gives 16 for large blocks: mmap with malloc's 16-byte header in
// front). From 2 MiB on, in transparent huge pages: 2 MiB-aligned and advised (MADV_HUGEPAGE) before the first
// write, which is all the kernel's default THP setting ("madvise") asks. Two threads streamed fp16 rows at 56 GB/s
// from huge pages against 38 from 4 KiB pages, eight alternations in one process on Zen 4 (docs/BENCHMARKS.md).
void* allocate_weights(size_t bytes);
void free_weights(void* p, size_t bytes);

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  // Dimension i; negative i counts from the end (-1 is the last dimension).
  int64_t operator[](int i) const;
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(float* data, Shape shape) : data_(data), shape_(shape) {}

  float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  int64_t size(int dim) const { return shape_[dim]; }
  std::span<float> span() const { return {data_, static_cast<size_t>(numel())}; }
  float& operator[](int64_t i) const { return data_[i]; }

  // The i-th slice along the first dimension: shape [d1, d2, ...].
  TensorView row(int64_t i) const;
  // The same elements under another shape with the same element count.
  TensorView reshaped(Shape shape) const;

 private:
  float* data_ = nullptr;
  Shape shape_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape);  // zero-filled
  Tensor(Shape shape, std::span<const float> values);
  Tensor(Shape shape, std::initializer_list<float> values)
      : Tensor(shape, std::span<const float>(values.begin(), values.size())) {}

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  static Tensor zeros(Shape shape) { return Tensor(shape); }
  // Memory left as it is: for outputs a kernel overwrites in full.
  static Tensor uninitialized(Shape shape) { return Tensor(shape, Uninitialized{}); }
  static Tensor full(Shape shape, float value);
  // A tensor over memory it does not own (a parameter's slice of its model's one buffer): the owner keeps
  // the memory alive as long as the tensor, and freeing the tensor leaves it alone.
  static Tensor borrowing(float* data, Shape shape);
  // In allocate_weights' memory (huge pages from 2 MiB on): a model's parameter and gradient buffers, which every
  // generated token or training step streams whole. Zero-filled, or left as they are for a buffer its maker
  // overwrites in full.
  static Tensor weights(Shape shape);
  static Tensor uninitialized_weights(Shape shape);
  Tensor clone() const;

  float* data() { return storage_.get(); }
  const float* data() const { return storage_.get(); }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  int64_t size(int dim) const { return shape_[dim]; }
  int rank() const { return shape_.rank(); }
  std::span<float> span() { return {data(), static_cast<size_t>(numel())}; }
  std::span<const float> span() const { return {data(), static_cast<size_t>(numel())}; }
  float& operator[](int64_t i) { return data()[i]; }
  float operator[](int64_t i) const { return data()[i]; }

  TensorView view() { return {data(), shape_}; }
  // Changes the shape in place; the element count must stay the same.
  void reshape(Shape shape);
  void fill(float value);
  void zero() { fill(0.0f); }

 private:
  struct Uninitialized {};
  Tensor(Shape shape, Uninitialized);

  // Returns the block to where it came from (src/core/tensor.cpp): the heap, which keeps large blocks for
  // reuse; free_weights; or nowhere, for borrowed memory.
  struct FreeDeleter {
    enum class From : uint8_t { Heap, Weights, Borrowed };
    FreeDeleter() noexcept {}
    explicit FreeDeleter(size_t size, From from = From::Heap) noexcept : bytes(size), from(from) {}
    size_t bytes = 0;
    From from = From::Heap;
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], FreeDeleter> storage_;
  Shape shape_{0};  // a default Tensor is empty
};

// Large tensor blocks (1 MiB and up) are kept when freed and handed out again for the same size: a training
// step allocates the same tensors every step, and reusing their pages avoids faulting fresh zeroed pages
// from the kernel each time (which cost PyTorch, and Attend before this, a tenth of a step). This releases
// the kept blocks; an allocation that fails releases them and tries again.
void release_cached_memory();
int64_t cached_memory_bytes();
// The most the kept blocks may hold (a quarter of physical memory unless set): beyond it a freed block
// displaces others. Without a limit, work whose shapes change from step to step (batches padded to their
// longest example) would keep a block of every size it ever used.
void set_cached_memory_limit(int64_t bytes);
int64_t cached_memory_limit();

// Throws attend::Error naming `what` and both shapes when `a` and `b` differ.
void check_same_shape(const Shape& a, const Shape& b, const char* what);

}  // namespace attend

template <>
struct fmt::formatter<attend::Shape> : fmt::formatter<std::string> {
  auto format(const attend::Shape& shape, format_context& ctx) const {
    return fmt::formatter<std::string>::format(shape.str(), ctx);
  }
};
