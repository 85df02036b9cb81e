// Encoding speed of Attend's tokenizers on a real corpus, for bench/tokenizer.sh.
//
//   attend_tokenizer_bench --tokenizer data/gpt2 --input data/brown.txt [--threads 1,2] [--repeats 5]
//                          [--compare-ids tiktoken.u32]
//
// For each thread count it prints one line of JSON: best-of-N seconds and MB/s with a cold piece cache
// (a freshly loaded tokenizer each repeat, as a peer without a cross-call cache sees it) and with a
// warm one (the same tokenizer again). --compare-ids checks the ids against a peer's (little-endian
// uint32) and reports the first difference.
#include <attend/runtime.h>
#include <attend/tokenizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer = "data/gpt2", input = "data/brown.txt", compare;
  std::vector<int> threads = {1, 2};
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tokenizer") tokenizer = value;
    else if (flag == "--input") input = value;
    else if (flag == "--repeats") repeats = std::stoi(value);
    else if (flag == "--compare-ids") compare = value;
    else if (flag == "--threads") {
      threads.clear();
      std::stringstream list(value);
      for (std::string t; std::getline(list, t, ',');) threads.push_back(std::stoi(t));
    } else {
      fmt::print(stderr, "unknown option {}\n", flag);
      return 1;
    }
  }
  const std::string text = read(input);
  const double mb = static_cast<double>(text.size()) / 1e6;
  for (int t : threads) {
    attend::set_num_threads(t);
    double cold = 1e30, warm = 1e30;
    std::vector<int32_t> ids;
    for (int r = 0; r < repeats; ++r) {
      const attend::Tokenizer tok = attend::Tokenizer::load(tokenizer);
      auto start = std::chrono::steady_clock::now();
      ids = tok.encode(text, {.parse_special = false});
      cold = std::min(cold, seconds_since(start));
      start = std::chrono::steady_clock::now();
      ids = tok.encode(text, {.parse_special = false});
      warm = std::min(warm, seconds_since(start));
    }
    std::string same = "null";
    if (!compare.empty()) {
      const std::string raw = read(compare);
      std::vector<int32_t> peer(raw.size() / 4);
      std::memcpy(peer.data(), raw.data(), peer.size() * 4);
      const auto diff = std::mismatch(ids.begin(), ids.end(), peer.begin(), peer.end());
      same = diff.first == ids.end() && diff.second == peer.end()
                 ? "true"
                 : fmt::format("\"first difference at token {}\"", diff.first - ids.begin());
    }
    fmt::print(
        "{{\"impl\": \"attend\", \"threads\": {}, \"bytes\": {}, \"tokens\": {}, \"cold_s\": {:.4f}, \"cold_MBps\": {:.1f}, "
        "\"warm_s\": {:.4f}, \"warm_MBps\": {:.1f}, \"ids_identical\": {}}}\n",
        t, text.size(), ids.size(), cold, mb / cold, warm, mb / warm, same);
  }
  return 0;
}
