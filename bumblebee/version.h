// The version of libbumblebee.so a program runs against (the project version
// of the top CMakeLists.txt), so a plugin or a program can report it.
#pragma once

namespace bb {
const char* library_version();   // "0.1.0"
}
