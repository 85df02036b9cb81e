#include <attend/error.h>

namespace attend {

Error::~Error() = default;

}  // namespace attend
