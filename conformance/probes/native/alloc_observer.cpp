// A lightweight observer of the torch CPU allocator, for conformance/observer.py.
//
// It installs itself where the profiler does (a ProfilerStateBase in the thread-local debug
// info, pushed with ProfilerStateBase::push), so the CPU allocator reports every allocation and
// free to it exactly as it reports them to the profiler, and registers a thread-local
// RecordFunction callback that keeps each thread's stack of operator and user ranges, so every
// allocation and free is attributed as it happens (see MemoryEvent).  No Kineto session to start
// and stop, no event tree to build afterwards.
// Its config says the profiler is disabled (torch.autograd._profiler_enabled() stays False):
// the program runs as users run it.
//
// Plain C functions (loaded with ctypes, no Python headers): conformance_observer_start, _stop,
// _count, _events, _call_count, _calls, _name.
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <time.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using torch::profiler::impl::ActiveProfilerType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
using torch::profiler::impl::ProfilerStateBase;


// One allocation or free, attributed as the profiler's event tree attributes it: the innermost
// "node:" range (the reference executor's node; it resets the operator context), the innermost
// dispatcher operator inside it, and the outermost operator call inside it (whose end decides
// whether a free happened inside that call).
struct MemoryEvent {
  int64_t time_ns;  // CLOCK_REALTIME, the clock IREE's probe and the profiler use
  int64_t ptr;
  int64_t size;   // negative: a free
  int64_t label;  // name index or -1
  int64_t op;     // name index or -1
  int64_t outer;  // index into g_calls or -1
};

struct OuterCall {
  int64_t name;
  int64_t end_ns;  // -1 while open
};

struct Frame {
  uint64_t handle;
  int64_t label;
  int64_t op;
  int64_t outer;
  int64_t opened;  // the outer call this frame opened, or -1
};

struct ThreadStack {
  uint64_t epoch = 0;
  std::vector<Frame> frames;
};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::mutex g_mutex;
std::string g_node_prefix = "node:";  // conformance.interpreter.NODE_RANGE_PREFIX, set by start
uint64_t g_epoch = 0;  // a new window: every thread's stack starts empty
std::vector<MemoryEvent> g_events;
std::vector<OuterCall> g_calls;
std::vector<std::string> g_names;
std::unordered_map<std::string, int64_t> g_name_index;
thread_local ThreadStack t_stack;

int64_t intern(const std::string& name) {
  auto it = g_name_index.find(name);
  if (it != g_name_index.end()) {
    return it->second;
  }
  int64_t index = static_cast<int64_t>(g_names.size());
  g_names.push_back(name);
  g_name_index.emplace(name, index);
  return index;
}

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

// conformance.observer.OPERATOR_NAME: ^[A-Za-z_][\w.]*::[\w.]+$
bool is_operator(const char* name) {
  if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    return false;
  }
  const char* sep = std::strstr(name, "::");
  if (sep == nullptr || sep[2] == '\0') {
    return false;
  }
  for (const char* c = name; c < sep; ++c) {
    if (!word_char(*c)) return false;
  }
  for (const char* c = sep + 2; *c; ++c) {
    if (!word_char(*c)) return false;
  }
  return true;
}

// The calling thread's stack for this window (g_mutex held).
std::vector<Frame>& frames() {
  if (t_stack.epoch != g_epoch) {
    t_stack.epoch = g_epoch;
    t_stack.frames.clear();
  }
  return t_stack.frames;
}

struct Observer final : public ProfilerStateBase {
  Observer() : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled, false, /*profile_memory=*/true)) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t /*total_allocated*/, size_t /*total_reserved*/,
                         c10::Device device) override {
    if (device.type() != c10::DeviceType::CPU) {
      return;
    }
    std::lock_guard<std::mutex> guard(g_mutex);
    auto& stack = frames();
    MemoryEvent e{now_ns(), reinterpret_cast<int64_t>(ptr), alloc_size, -1, -1, -1};
    if (!stack.empty()) {
      e.label = stack.back().label;
      e.op = stack.back().op;
      e.outer = stack.back().outer;
    }
    g_events.push_back(e);
  }

  bool memoryProfilingEnabled() const override {
    return true;
  }

  ActiveProfilerType profilerType() override {
    return ActiveProfilerType::NONE;
  }
};

// What a range's name is: a node range (index of the node's label), an operator (index of its
// name), or neither.  Cached by the name's address, checked against the text (an address can be
// reused for another name), so an operator's name is classified and interned once.
struct NameInfo {
  std::string text;
  int64_t label = -1;
  int64_t op = -1;
};

std::unordered_map<const char*, NameInfo> g_name_info;

const NameInfo& classify(const char* name) {
  auto& info = g_name_info[name];
  if (!info.text.empty() && info.text == name) {
    return info;
  }
  info.text = name;
  info.label = info.op = -1;
  if (std::strncmp(name, g_node_prefix.c_str(), g_node_prefix.size()) == 0) {
    info.label = intern(std::string(name + g_node_prefix.size()));
  } else if (is_operator(name)) {
    info.op = intern(info.text);
  }
  return info;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const char* name = fn.name();
  std::lock_guard<std::mutex> guard(g_mutex);
  auto& stack = frames();
  Frame frame{fn.handle(), -1, -1, -1, -1};
  if (!stack.empty()) {
    frame.label = stack.back().label;
    frame.op = stack.back().op;
    frame.outer = stack.back().outer;
  }
  const NameInfo& info = classify(name);
  if (info.label >= 0) {
    frame.label = info.label;
    frame.op = -1;
    frame.outer = -1;
  } else if (info.op >= 0) {
    frame.op = info.op;
    if (frame.outer < 0) {
      frame.outer = frame.opened = static_cast<int64_t>(g_calls.size());
      g_calls.push_back({frame.op, -1});
    }
  }
  stack.push_back(frame);
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*ctx*/) {
  uint64_t handle = fn.handle();
  std::lock_guard<std::mutex> guard(g_mutex);
  auto& stack = frames();
  int64_t t = now_ns();
  while (!stack.empty()) {
    Frame frame = stack.back();
    stack.pop_back();
    if (frame.opened >= 0) {
      g_calls[static_cast<size_t>(frame.opened)].end_ns = t;
    }
    if (frame.handle == handle) {
      break;
    }
  }
}

}  // namespace

// Whether a profiler (or another observer) is active on this thread or globally.  torch 2.14 split
// ProfilerStateBase::get(bool global) into getTLS() and getGlobal(): whichever this torch has is used.
template <typename State>
bool profiler_active() {
  if constexpr (requires { State::getTLS(); }) {
    return State::getTLS() != nullptr || State::getGlobal() != nullptr;
  } else {
    return State::get(/*global=*/false) != nullptr || State::get(/*global=*/true) != nullptr;
  }
}

extern "C" {

// 0: started; 1: a profiler (or another observer) is already active on this thread.
// node_prefix: the user-range prefix that names a reference-executor node.
int conformance_observer_start(const char* node_prefix) {
  if (profiler_active<ProfilerStateBase>()) {
    return 1;
  }
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    ++g_epoch;
    if (g_node_prefix != node_prefix) {
      g_node_prefix = node_prefix;
      g_name_info.clear();
    }
    g_events.clear();
    g_calls.clear();
    g_events.reserve(1024);
  }
  auto state = std::make_shared<Observer>();
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_start, &on_end).needsInputs(false).needsOutputs(false).needsIds(true));
  state->setCallbackHandle(handle);
  ProfilerStateBase::push(std::move(state));
  return 0;
}

// Pops the observer and removes its callback.
void conformance_observer_stop() {
  auto state = ProfilerStateBase::pop(/*global=*/false);
  if (state) {
    state->removeCallback();
  }
}

int64_t conformance_observer_count() {
  std::lock_guard<std::mutex> guard(g_mutex);
  return static_cast<int64_t>(g_events.size());
}

// Copies the memory events (6 int64 each: time, ptr, size, label, op, outer call) into out.
void conformance_observer_events(int64_t* out) {
  std::lock_guard<std::mutex> guard(g_mutex);
  for (const MemoryEvent& e : g_events) {
    *out++ = e.time_ns;
    *out++ = e.ptr;
    *out++ = e.size;
    *out++ = e.label;
    *out++ = e.op;
    *out++ = e.outer;
  }
}

int64_t conformance_observer_call_count() {
  std::lock_guard<std::mutex> guard(g_mutex);
  return static_cast<int64_t>(g_calls.size());
}

// Copies the outermost operator calls (2 int64 each: name, end time or -1 if still open) into out.
void conformance_observer_calls(int64_t* out) {
  std::lock_guard<std::mutex> guard(g_mutex);
  for (const OuterCall& c : g_calls) {
    *out++ = c.name;
    *out++ = c.end_ns;
  }
}

const char* conformance_observer_name(int64_t index) {
  std::lock_guard<std::mutex> guard(g_mutex);
  if (index < 0 || index >= static_cast<int64_t>(g_names.size())) {
    return "";
  }
  return g_names[static_cast<size_t>(index)].c_str();
}

}  // extern "C"
