// Reading the model fixtures of tests/data/models (made by tools/make_model_fixtures.py).
#pragma once

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <vector>

namespace attend::testing {

inline const std::filesystem::path kModels = std::filesystem::path(ATTEND_TEST_DATA) / "models";

inline std::vector<int32_t> flatten_ids(const nlohmann::json& rows) {
  std::vector<int32_t> out;
  for (const auto& row : rows)
    for (const auto& v : row) out.push_back(v.get<int32_t>());
  return out;
}

// A golden.json "batch" object: ids, lengths, targets, labels, and src_ids/src_lengths for encoder-decoders.
inline Batch batch_from_json(const nlohmann::json& j) {
  Batch b;
  b.B = static_cast<int64_t>(j["ids"].size());
  b.T = static_cast<int64_t>(j["ids"][0].size());
  b.ids = flatten_ids(j["ids"]);
  b.lengths = j["lengths"].get<std::vector<int32_t>>();
  b.targets = flatten_ids(j["targets"]);
  b.labels = j.value("labels", std::vector<int32_t>{});
  if (j.contains("src_ids")) {
    b.src_T = static_cast<int64_t>(j["src_ids"][0].size());
    b.src_ids = flatten_ids(j["src_ids"]);
    b.src_lengths = j["src_lengths"].get<std::vector<int32_t>>();
  }
  return b;
}

}  // namespace attend::testing
