// Base64 (RFC 4648's alphabet, '=' padding): how tokenizer.json carries SentencePiece's binary character map.
#pragma once

#include <string>
#include <string_view>

namespace attend {

std::string base64_encode(std::string_view bytes);
// Decodes up to the first '='; a character outside the alphabet is an attend::Error naming `what`.
std::string base64_decode(std::string_view text, std::string_view what);

}  // namespace attend
