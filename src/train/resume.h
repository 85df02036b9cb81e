// The small files a resumed run reads back besides the model and the optimiser's state: trainer.json (the
// step and the guards' state) and metrics.jsonl (a JSON object per step). Parsed from their text (fuzz/
// reaches them so); errors name `origin`, the file, and the field or line at fault.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace attend::train {

// What trainer.json holds besides the model and the optimiser: the step and the guards' state. Every field
// is checked, so a damaged file is an error naming the file and the field, not a parser's exception.
struct SavedState {
  int64_t step = -1, bad_streak = 0, clean_steps = 0;
  double loss_average = NAN, elapsed_s = 0.0;
  std::optional<double> loss_scale;  // runs saved before f16 training existed have none
};
SavedState parse_trainer_state(std::string_view text, std::string_view origin);

// The metrics of the steps up to `step`, line for line: the steps after the checkpoint are trained again.
// metrics.jsonl is appended a line per step, so a crash can cut its last line short; such a line (the last,
// without its newline, not valid JSON) is dropped. Any other line that is not a JSON object with an integer
// "step" is an error naming its line.
std::string metrics_up_to(std::string_view text, std::string_view origin, int64_t step);

}  // namespace attend::train
