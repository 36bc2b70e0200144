// gym-stat: a live view of every limit, operation, server and writer of the
// registry, read directly (read-only: it never retires or removes anything,
// so it runs beside gym-exporter, or without one).
//
//   gym-stat [--registry.dir=DIR] [--interval=SECONDS] [--window=SECONDS] [--once | --json]
//            [--sort=saturation|queue|name] [--filter=TEXT] [--proc-root=DIR]
//            [--gpu-library=PATH] [--config.file=FILE]
//
// Its servers are resolved and sampled by the exporter's own servers unit and
// collectors (servers, memory, gpu), run in-process: the numbers it shows are
// computed as /metrics computes them. Its first line is the verdict of its
// window of refreshes, by the rules of the configuration's verdict: section
// (snapshot/verdict.h).
#include <curses.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "collectors/verdict.h"
#include "frame.h"
#include "gym/contract.h"
#include "gym/registry_reader.h"
#include "gym/segment_writer.h"
#include "servers/board.h"
#include "servers/deaths.h"
#include "shared_registry.h"
#include "snapshot/view.h"
#include "snapshot/window.h"
#include "wiring.h"

namespace gym::stat {
namespace {

struct Args {
  std::string dir;
  std::optional<std::string> proc_root;    // else the configuration's
  std::optional<std::string> gpu_library;  // else the configuration's
  std::string config_file;                 // the exporter's (its servers: and gpu:)
  double interval = 1;
  std::optional<double> window;  // else the configuration's verdict.window_seconds
  bool once = false;
  bool json = false;
  FrameOptions frame;
};

const char* kUsage =
    "usage: gym-stat [--registry.dir=DIR] [--interval=SECONDS] [--window=SECONDS]\n"
    "                [--once | --json]\n"
    "                [--sort=saturation|queue|name] [--filter=TEXT] [--proc-root=DIR]\n"
    "                [--gpu-library=PATH] [--config.file=FILE]\n\n"
    "A live view of the NeMo Gym metrics registry (read-only; runs beside gym-exporter).\n"
    "  --once   print one table (rates over one interval) and exit\n"
    "  --window the verdict's window (default: the configuration's, 30 s)\n"
    "  --json   print one JSON snapshot (docs/snapshot.schema.json) and exit\n"
    "  --config.file  the exporter's configuration: its servers (servers:) and gpu: sections\n"
    "Keys: s sort, / filter, c clear the filter, q quit.\n";

// A number of seconds from `min` to 3600.
bool seconds_in(const std::string& text, double min, double& out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= min) || v > 3600) return false;
  out = v;
  return true;
}

// 0: go on; otherwise the exit status.
int parse(int argc, char** argv, Args& a) {
  const char* env = std::getenv(SegmentWriter::kDirEnv);
  a.dir = env ? env : kDefaultRegistryDir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      const std::string prefix = std::string(name) + "=";
      if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
      return std::nullopt;
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return -1;
    } else if (arg == "--once") {
      a.once = true;
    } else if (arg == "--json") {
      a.json = true;
    } else if (auto v = value("--registry.dir")) {
      a.dir = *v;
    } else if (auto v = value("--gpu-library")) {
      a.gpu_library = *v;
    } else if (auto v = value("--proc-root")) {
      a.proc_root = *v;
    } else if (auto v = value("--config.file")) {
      a.config_file = *v;
    } else if (auto v = value("--filter")) {
      a.frame.filter = *v;
    } else if (auto v = value("--interval")) {
      if (!seconds_in(*v, 0, a.interval)) {
        std::fprintf(stderr, "gym-stat: --interval must be a number of seconds, 0 to 3600\n");
        return 2;
      }
    } else if (auto v = value("--window")) {
      double w = 0;
      if (!seconds_in(*v, 1, w)) {
        std::fprintf(stderr, "gym-stat: --window must be a number of seconds, 1 to 3600\n");
        return 2;
      }
      a.window = w;
    } else if (auto v = value("--sort")) {
      if (*v == "saturation")
        a.frame.sort = Sort::kSaturation;
      else if (*v == "queue")
        a.frame.sort = Sort::kQueue;
      else if (*v == "name")
        a.frame.sort = Sort::kName;
      else {
        std::fprintf(stderr, "gym-stat: --sort must be saturation, queue or name\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "gym-stat: unknown argument %s (see --help)\n", arg.c_str());
      return 2;
    }
  }
  return 0;
}

// The configuration: the exporter's file when named, the flags over it
// (parsed once, with them).
std::optional<exporter::Config> load_config(const Args& a) {
  exporter::KeyOverrides keys;
  if (a.proc_root) keys.push_back({"servers", "proc_root", *a.proc_root});
  if (a.gpu_library) keys.push_back({"gpu", "library", *a.gpu_library});
  const exporter::ConfigResult r = a.config_file.empty()
                                       ? exporter::parse_config("", "gym-stat", keys)
                                       : exporter::load_config_file(a.config_file, keys);
  for (const auto& e : r.errors) std::fprintf(stderr, "gym-stat: %s\n", e.c_str());
  if (!r.ok()) return std::nullopt;
  return r.config;
}

class Source {
 public:
  // `log` receives the collectors' problems.
  Source(const Args& a, const exporter::Config& config, exporter::Log log)
      : args_(a),
        registry_(std::make_shared<exporter::SharedRegistry>(a.dir, read_only())),
        board_(std::make_shared<exporter::ServerBoard>()),
        deaths_(std::make_shared<exporter::DeathLog>()),
        collectors_(with_times(
            exporter::make_collectors(config, {registry_, std::move(log), nullptr, board_, deaths_},
                                      {"servers", "memory", "gpu", "deaths"}))) {}
  // The registry now, into `out` (reusing its storage); the servers as the
  // collectors' last samples say. Each collector samples when its interval
  // has passed, as in the exporter, not at every refresh: a memory sample
  // reads PSS, which costs the servers (docs/memory.md).
  void next(exporter::View& out) {
    const int64_t start_ns = segment::precise_now_ns();
    const auto now = std::chrono::steady_clock::now();
    for (auto& [c, last] : collectors_) {
      if (last && now - *last < c->interval()) continue;
      c->refresh();
      last = now;
    }
    const exporter::BoardFigures figures = board_->read();
    registry_->with([&](RegistryReader& r) {
      // The snapshot the servers were resolved from, when this refresh took
      // one: the registry is read once a refresh, and limits and servers
      // come from the same moment.
      const bool fresh = r.last_snapshot().monotonic_ns >= start_ns;
      builder_.build(fresh ? r.last_snapshot() : r.snapshot(), args_.dir, figures, out);
      return 0;
    });
    out.deaths = deaths_->records("", out.time_seconds - kDeathsShown, "");
    out.deaths_followed = deaths_->connected();
  }
  // The deaths pane shows the last minute's.
  static constexpr double kDeathsShown = 60;

 private:
  using Collectors = std::vector<std::pair<std::unique_ptr<exporter::Collector>,
                                           std::optional<std::chrono::steady_clock::time_point>>>;
  static Collectors with_times(std::vector<std::unique_ptr<exporter::Collector>> all) {
    Collectors out;
    for (auto& c : all) out.emplace_back(std::move(c), std::nullopt);
    return out;
  }
  static ReaderOptions read_only() {
    ReaderOptions o;
    o.mode = ReaderOptions::Mode::kReadOnly;
    return o;
  }
  const Args& args_;
  std::shared_ptr<exporter::SharedRegistry> registry_;
  std::shared_ptr<exporter::ServerBoard> board_;
  std::shared_ptr<exporter::DeathLog> deaths_;  // its servers' processes that died
  Collectors collectors_;                       // with when each sampled last
  exporter::ViewBuilder builder_;
};

// The verdict's settings: the configuration's verdict: section (its
// defaults without one), the window as --window says.
exporter::VerdictSettings verdict_settings(const Args& a, const exporter::Config& config) {
  auto s = exporter::collector_settings<exporter::VerdictSettings>(config, "verdict");
  if (a.window) s.window_seconds = *a.window;
  return s;
}

// Two views: the one shown and the one before it (for rates); the window
// of every view so far (for the verdict).
struct Views {
  explicit Views(const exporter::VerdictSettings& s) : rules(s), windows(s.window_seconds) {}
  exporter::View a, b;
  exporter::View* now = &a;
  exporter::View* previous = nullptr;
  exporter::VerdictRules rules;
  exporter::WindowSampler windows;
  void first(Source& source) {
    source.next(*now);
    windows.add(*now);
  }
  void advance(Source& source) {
    exporter::View* spare = now == &a ? &b : &a;
    source.next(*spare);
    previous = now;
    now = spare;
    windows.add(*now);
  }
  // The verdict of the window (of the view shown, before a second).
  exporter::Verdict verdict() const {
    const exporter::Window* w = windows.current();
    return w ? exporter::verdict(*w, rules) : exporter::verdict(exporter::window_of(*now), rules);
  }
  std::vector<Line> lines(const FrameOptions& o) const {
    const exporter::Verdict v = verdict();
    return frame(*now, previous, o, &v);
  }
};

void draw(const std::vector<Line>& lines) {
  erase();
  const int rows = LINES, cols = COLS;
  for (int y = 0; y < rows && y < int(lines.size()); ++y) {
    const Line& l = lines[size_t(y)];
    const std::string text = l.text.substr(0, size_t(std::max(cols - 1, 0)));
    const attr_t attr = l.kind == Line::Kind::kTitle    ? A_BOLD
                        : l.kind == Line::Kind::kHeader ? A_REVERSE
                                                        : A_NORMAL;
    attron(attr);
    mvaddstr(y, 0, text.c_str());
    attroff(attr);
    if (l.bar_width > 0 && has_colors() && int(l.bar_at + l.bar_width) < cols) {
      const short pair = l.fill >= 1 ? 1 : l.fill >= 0.8 ? 2 : 3;
      mvchgat(y, int(l.bar_at), int(l.bar_width), A_BOLD, pair, nullptr);
    }
  }
  refresh();
}

// Reads a filter at the bottom line; Enter ends it, Escape cancels.
void read_filter(std::string& filter) {
  std::string text;
  timeout(-1);
  for (;;) {
    mvprintw(LINES - 1, 0, "filter: %s", text.c_str());
    clrtoeol();
    refresh();
    const int c = getch();
    if (c == '\n' || c == KEY_ENTER) break;
    if (c == 27) return;
    if ((c == KEY_BACKSPACE || c == 127 || c == 8) && !text.empty()) text.pop_back();
    if (c >= 32 && c < 127) text += char(c);
  }
  filter = text;
}

int interactive(Args& a, Source& source, Views& views) {
  initscr();
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  curs_set(0);
  if (has_colors()) {
    start_color();
    use_default_colors();
    init_pair(1, COLOR_RED, -1);
    init_pair(2, COLOR_YELLOW, -1);
    init_pair(3, COLOR_GREEN, -1);
  }
  auto next_at = std::chrono::steady_clock::now();
  for (;;) {
    a.frame.max_lines = size_t(std::max(LINES, 1));
    draw(views.lines(a.frame));
    next_at += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::max(a.interval, 0.1)));
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        next_at - std::chrono::steady_clock::now());
    timeout(int(std::max<int64_t>(wait.count(), 0)));
    const int c = getch();
    if (c == 'q' || c == 'Q') break;
    if (c == 's') a.frame.sort = Sort((int(a.frame.sort) + 1) % 3);
    if (c == 'c') a.frame.filter.clear();
    if (c == '/') read_filter(a.frame.filter);
    if (c != ERR) continue;  // redraw at once; the data moves on schedule
    views.advance(source);
  }
  endwin();
  return 0;
}

int run(int argc, char** argv) {
  Args a;
  if (int rc = parse(argc, argv, a); rc != 0) return rc < 0 ? 0 : rc;
  // The exporter's own log lines (spdlog) would land in the screen or the
  // JSON: gym-stat says problems on standard error, and not on the screen.
  spdlog::set_level(spdlog::level::off);
  const std::optional<exporter::Config> config = load_config(a);
  if (!config) return 2;
  const bool screen = !a.once && !a.json && ::isatty(STDOUT_FILENO) && ::isatty(STDIN_FILENO);
  Source source(a, *config, [screen](const std::string& problem) {
    if (!screen) std::fprintf(stderr, "gym-stat: %s\n", problem.c_str());
  });
  Views views(verdict_settings(a, *config));
  views.first(source);
  if (a.json) {
    const exporter::Verdict v = views.verdict();
    std::fputs(exporter::to_json(*views.now, &v).c_str(), stdout);
    return 0;
  }
  if (screen) return interactive(a, source, views);
  // Plain text: once, or every interval when the output is not a terminal.
  for (;;) {
    if (a.interval > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(a.interval));
      views.advance(source);
    }
    std::fputs(plain(views.lines(a.frame)).c_str(), stdout);
    std::fflush(stdout);
    if (a.once || a.interval <= 0) return 0;
    std::fputs("\n", stdout);
  }
}

}  // namespace
}  // namespace gym::stat

int main(int argc, char** argv) {
  return gym::stat::run(argc, argv);
}
