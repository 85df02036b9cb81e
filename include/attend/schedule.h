// Learning-rate schedules (004 §9.3), as functions of the step t = 1, 2, ...
//
//   constant      η_t = η
//   warmup        η_t = η·min(t/T_w, 1)                                              (eq. 10)
//   cosine        warm-up, then η_min + (η − η_min)·½(1 + cos(π·(t − T_w)/(T − T_w))), η_min after T
//   inverse_sqrt  η_t = η·d_model^−½·min(t^−½, t·T_w^−3/2)   (the original Transformer's; η = 1 is the paper's)
#pragma once

#include <cstdint>
#include <string_view>

namespace attend::train {

enum class ScheduleKind { Constant, Warmup, Cosine, InverseSqrt };
const char* schedule_name(ScheduleKind kind);  // "constant", "warmup", "cosine", "inverse_sqrt"
ScheduleKind parse_schedule(std::string_view name);

struct Schedule {
  ScheduleKind kind = ScheduleKind::Cosine;
  double lr = 3e-4;            // η: the peak rate (inverse_sqrt: a multiplier, 1 for the paper's)
  int64_t warmup_steps = 0;    // T_w, e.g. 100
  int64_t total_steps = 0;     // T: where cosine reaches min_lr, e.g. 10000
  double min_lr = 0.0;         // η_min, the cosine floor, e.g. 3e-5
  int64_t d_model = 512;       // inverse_sqrt only (the Trainer sets it to the model's d_model)

  // Throws attend::Error naming the field when the schedule cannot be computed.
  void validate() const;
  double at(int64_t t) const;
};

}  // namespace attend::train
