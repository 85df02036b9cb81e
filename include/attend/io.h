// Reading and writing whole files, with errors that name the file.
//
// Every file Attend writes goes through write_file_atomic: the bytes go to a temporary file beside the
// target, are flushed to disk, and the temporary is renamed over the target. A crash or a full disk
// never leaves half a file where a good one was.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace attend {

std::string read_file(const std::filesystem::path& path);
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace attend
