#include "servers/board.h"

namespace gym::exporter {

void ServerBoard::post(const std::string& source, std::shared_ptr<const ServerFigures> figures) {
  std::lock_guard<std::mutex> lock(mu_);
  figures_[source] = std::move(figures);
}

std::map<std::string, std::shared_ptr<const ServerFigures>> ServerBoard::read() const {
  std::lock_guard<std::mutex> lock(mu_);
  return figures_;
}

}  // namespace gym::exporter
