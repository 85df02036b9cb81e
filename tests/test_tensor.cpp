#include <attend/error.h>
#include <attend/parameter.h>
#include <attend/tensor.h>

#include <gtest/gtest.h>

#include <cstdint>

namespace attend {
namespace {

TEST(Shape, BasicsAndFormatting) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(fmt::format("{}", s), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_THROW(s[3], Error);
  EXPECT_THROW((Shape{2, -1}), Error);
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1}), Error);
}

TEST(Tensor, ZeroInitialisedAndAligned) {
  Tensor t({3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (float v : t.span()) EXPECT_EQ(v, 0.0f);
  Tensor empty;
  EXPECT_EQ(empty.numel(), 0);
  empty.fill(1.0f);  // a no-op, not a crash
}

// A model's parameter and gradient buffers: zeroed, on 64 bytes, and from 2 MiB on on a 2 MiB boundary (where
// the kernel can back them with huge pages); freed by free_weights, not the heap or the kept blocks.
TEST(Tensor, WeightsAreZeroedAndAlignedForHugePages) {
  for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{1} << 19, (int64_t{1} << 19) + 1, int64_t{3} << 20}) {
    Tensor t = Tensor::weights({n});
    EXPECT_EQ(t.numel(), n);
    ASSERT_NE(t.data(), nullptr);
    const uintptr_t alignment = n * 4 >= (int64_t{2} << 20) ? uintptr_t{2} << 20 : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % alignment, 0u) << n;
    for (float v : t.span()) ASSERT_EQ(v, 0.0f) << n;
    t.fill(2.0f);
    Tensor moved = std::move(t);
    if (n > 0) {
      EXPECT_EQ(moved[n - 1], 2.0f);
    }
  }
  const int64_t kept = cached_memory_bytes();
  { Tensor big = Tensor::weights({int64_t{1} << 20}); }
  EXPECT_EQ(cached_memory_bytes(), kept);  // not handed to the heap's kept blocks
}

TEST(Tensor, CloneIsDeepAndMoveTransfers) {
  Tensor a({2, 2}, {1, 2, 3, 4});
  Tensor b = a.clone();
  b[0] = 9;
  EXPECT_EQ(a[0], 1);
  Tensor c = std::move(a);
  EXPECT_EQ(c[3], 4);
}

TEST(Tensor, ViewsBorrowTheStorage) {
  Tensor t({2, 3}, {1, 2, 3, 4, 5, 6});
  TensorView row = t.view().row(1);
  EXPECT_EQ(row.shape(), Shape{3});
  row[0] = 40;
  EXPECT_EQ(t[3], 40);
  TensorView flat = t.view().reshaped({6});
  EXPECT_EQ(flat[5], 6);
  EXPECT_THROW(t.view().reshaped({4}), Error);
  EXPECT_THROW(t.view().row(2), Error);
}

TEST(Tensor, ReshapeChecksTheElementCount) {
  Tensor t({2, 3});
  t.reshape({3, 2});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  try {
    t.reshape({4, 2});
    FAIL() << "expected attend::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor({2, 2}, {1, 2, 3}), Error);
}

TEST(Parameter, GradientHasTheValuesShape) {
  Parameter p("h.0.mlp.c_fc.weight", {4, 3}, Role::FfnIn);
  EXPECT_EQ(p.grad.shape(), p.value.shape());
  p.grad.fill(1.0f);
  p.zero_grad();
  for (float g : p.grad.span()) EXPECT_EQ(g, 0.0f);
  EXPECT_EQ(p.numel(), 12);
}

}  // namespace
}  // namespace attend

namespace attend {
namespace {

// Large blocks are kept when freed and handed out again for the same size (not under AddressSanitizer,
// which must see every free).
TEST(TensorMemory, LargeBlocksAreReusedAndReleased) {
  release_cached_memory();
  const Shape big{512, 1024};  // 2 MiB
  [[maybe_unused]] const float* first = nullptr;  // compared only where blocks are kept
  {
    Tensor t(big);
    first = t.data();
  }
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(cached_memory_bytes(), 0);
#else
  EXPECT_EQ(cached_memory_bytes(), 512 * 1024 * 4);
  Tensor again(big);
  EXPECT_EQ(again.data(), first);             // the same block
  EXPECT_EQ(again[12345], 0.0f);              // and zeroed again
  EXPECT_EQ(cached_memory_bytes(), 0);
  { Tensor small({10}); }
  EXPECT_EQ(cached_memory_bytes(), 0);        // small blocks go back to malloc
  { Tensor other({1024, 1024}); }
  EXPECT_EQ(cached_memory_bytes(), 1024 * 1024 * 4);
  release_cached_memory();
  EXPECT_EQ(cached_memory_bytes(), 0);
#endif
}

// Shapes that change every step (padded batches) must not keep a block of every size: the kept blocks stay
// under the limit, the newest freed block is kept, and a block larger than the limit is not kept at all.
// (The SpamAssassin classifier once grew to 23 GB this way and was killed.)
TEST(TensorMemory, KeptBlocksStayUnderTheLimit) {
  release_cached_memory();
  const int64_t limit = cached_memory_limit();
  EXPECT_GT(limit, int64_t{1} << 28);  // a quarter of physical memory by default
  set_cached_memory_limit(int64_t{8} << 20);  // 8 MiB
  for (int64_t rows = 256; rows < 256 + 40; ++rows) { Tensor t({rows, 1024}); }  // 40 sizes of about 1 MiB
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LE(cached_memory_bytes(), int64_t{8} << 20);
  EXPECT_GE(cached_memory_bytes(), int64_t{6} << 20);  // full, not emptied
  { Tensor last({295, 1024}); }  // the size freed last is still kept: taken, then put back
  EXPECT_LE(cached_memory_bytes(), int64_t{8} << 20);
  { Tensor huge({4096, 1024}); }  // 16 MiB: above the limit, freed at once
  EXPECT_LE(cached_memory_bytes(), int64_t{8} << 20);
#endif
  set_cached_memory_limit(limit);
  release_cached_memory();
  EXPECT_EQ(cached_memory_bytes(), 0);
}

}  // namespace
}  // namespace attend
