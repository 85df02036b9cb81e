#include <attend/schedule.h>

#include "core/json_fields.h"

#include <attend/error.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace attend::train {

namespace {
constexpr EnumName<ScheduleKind> kSchedules[] = {{ScheduleKind::Constant, "constant"},
                                                 {ScheduleKind::Warmup, "warmup"},
                                                 {ScheduleKind::Cosine, "cosine"},
                                                 {ScheduleKind::InverseSqrt, "inverse_sqrt"}};
}  // namespace

}  // namespace attend::train

namespace attend {
template <>
std::span<const EnumName<train::ScheduleKind>> names_of() {
  return train::kSchedules;
}
}  // namespace attend

namespace attend::train {

const char* schedule_name(ScheduleKind kind) { return enum_name<ScheduleKind>(kSchedules, kind); }
ScheduleKind parse_schedule(std::string_view name) { return parse_enum<ScheduleKind>(kSchedules, name, "schedule"); }

void Schedule::validate() const {
  check(lr > 0.0 && std::isfinite(lr), "schedule: lr must be positive, got {}", lr);
  check(warmup_steps >= 0, "schedule: warmup_steps must be non-negative, got {}", warmup_steps);
  if (kind == ScheduleKind::Cosine) {
    check(total_steps > warmup_steps, "schedule: cosine needs total_steps ({}) above warmup_steps ({})", total_steps,
          warmup_steps);
    check(min_lr >= 0.0 && min_lr <= lr, "schedule: min_lr must be in [0, lr = {}], got {}", lr, min_lr);
  }
  if (kind == ScheduleKind::InverseSqrt) {
    check(warmup_steps > 0, "schedule: inverse_sqrt needs warmup_steps > 0 (T_w^−3/2)");
    check(d_model > 0, "schedule: inverse_sqrt needs d_model > 0, got {}", d_model);
  }
}

double Schedule::at(int64_t t) const {
  t = std::max<int64_t>(t, 1);
  const double warm = warmup_steps > 0 ? std::min(1.0, double(t) / double(warmup_steps)) : 1.0;
  switch (kind) {
    case ScheduleKind::Constant: return lr;
    case ScheduleKind::Warmup: return lr * warm;
    case ScheduleKind::Cosine: {
      if (t <= warmup_steps) return lr * warm;
      if (t >= total_steps) return min_lr;
      const double progress = double(t - warmup_steps) / double(total_steps - warmup_steps);
      return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
    case ScheduleKind::InverseSqrt:
      return lr / std::sqrt(double(d_model)) *
             std::min(1.0 / std::sqrt(double(t)), double(t) * std::pow(double(warmup_steps), -1.5));
  }
  return lr;
}

}  // namespace attend::train
