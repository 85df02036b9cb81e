// Bad input gets an attend::Error whose message names the operation and both shapes.
#include <attend/error.h>
#include <attend/log.h>
#include <attend/ops.h>

#include "testing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attend {
namespace {

void expect_error_mentions(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  testing::expect_error_mentions<Error>(fn, needles);
}

TEST(OpsErrors, MatmulNamesBothShapes) {
  Tensor a({2, 3}), b({4, 5});
  expect_error_mentions([&] { ops::matmul(a, b); }, {"matmul", "[2, 3]", "[4, 5]"});
}

TEST(OpsErrors, LinearNamesInputAndWeight) {
  Tensor x({7, 13}), w({5, 12}), bias({4}), good_w({5, 13});
  expect_error_mentions([&] { ops::linear(x, w); }, {"linear", "[7, 13]", "[5, 12]"});
  expect_error_mentions([&] { ops::linear(x, good_w, &bias); }, {"bias", "[5, 13]", "[4]"});
}

TEST(OpsErrors, NormWeightsMustMatchChannels) {
  Tensor x({7, 13}), w({12});
  expect_error_mentions([&] { ops::layer_norm(x, w); }, {"layer_norm", "[7, 13]", "[12]"});
  expect_error_mentions([&] { ops::rms_norm(x, w); }, {"rms_norm", "[7, 13]", "[12]"});
}

TEST(OpsErrors, ElementwisePairsMustMatch) {
  Tensor a({3, 4}), b({4, 3});
  expect_error_mentions([&] { ops::swiglu(a, b); }, {"swiglu", "[3, 4]", "[4, 3]"});
  expect_error_mentions([&] { ops::cosine_similarity(a, b); }, {"cosine_similarity", "[3, 4]", "[4, 3]"});
  expect_error_mentions([&] { ops::euclidean_distance(a, b); }, {"euclidean_distance", "[3, 4]", "[4, 3]"});
}

TEST(OpsErrors, TokenIdsAndTargetsAreRangeChecked) {
  Tensor table({10, 4}), logits({3, 10});
  std::vector<int32_t> ids = {1, 10};
  expect_error_mentions([&] { ops::embedding(table, ids); }, {"token id 10", "[0, 10)"});
  std::vector<int32_t> two_targets = {1, 2};
  expect_error_mentions([&] { ops::cross_entropy(logits, two_targets); }, {"[3, 10]", "2 targets"});
  std::vector<int32_t> bad_targets = {1, 2, 11};
  expect_error_mentions([&] { ops::cross_entropy(logits, bad_targets); }, {"target 11", "row 2"});
}

TEST(OpsErrors, ArgumentsOutOfRange) {
  Tensor x({2, 5}), keys({4, 5}), q({1, 5});
  expect_error_mentions([&] { ops::softmax(x, 0.0f); }, {"temperature"});
  expect_error_mentions([&] { ops::mips_topk(q, keys, 5); }, {"k must be in [1, 4]"});
  expect_error_mentions([&] { ops::cross_entropy(x, std::vector<int32_t>{0, 1}, 1.5f); }, {"label_smoothing"});
  expect_error_mentions([&] { parse_activation("gelu2"); }, {"gelu2", "relu"});
  expect_error_mentions([&] { log::parse_level("loud"); }, {"loud"});
}

TEST(Ops, GoodInputGivesTheKernelResult) {
  Tensor a({2, 2}, {1, 2, 3, 4}), b({2, 1}, {1, 1});
  Tensor c = ops::matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 1}));
  EXPECT_FLOAT_EQ(c[0], 3);
  EXPECT_FLOAT_EQ(c[1], 7);
  Tensor logits({1, 2}, {0.0f, 0.0f});
  EXPECT_NEAR(ops::cross_entropy(logits, std::vector<int32_t>{1}), std::log(2.0), 1e-7);
  EXPECT_EQ(ops::logsumexp(Tensor({2, 3})).shape(), Shape{2});
}

}  // namespace
}  // namespace attend
