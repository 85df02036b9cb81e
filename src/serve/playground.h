// The page `attend serve` answers GET / with: a playground for the server's own API (a prompt or a chat, the main
// sampling parameters, the answer streamed as it is made). One self-contained page: no scripts from elsewhere.
#pragma once

#include <string>

namespace attend::serve {

const std::string& playground_html();

}  // namespace attend::serve
