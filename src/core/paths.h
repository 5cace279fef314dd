// Where tachyon keeps its files: ${TACHYON_HOME:-~/.cache/tachyon}.
#pragma once

#include <string>

namespace tachyon {

std::string tachyon_home();
// The model used when none is given: <home>/models/SmolLM2-135M-Instruct.Q4_1.gguf
std::string default_model_path();
// API keys and the usage ledger (SQLite): <home>/tachyon.db
std::string default_database_path();

}  // namespace tachyon
