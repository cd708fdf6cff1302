// A lightweight observer of the torch CPU allocator, for conformance/observer.py.
//
// It installs itself where the profiler does (a ProfilerStateBase in the thread-local debug
// info, pushed with ProfilerStateBase::push), so the CPU allocator reports every allocation and
// free to it exactly as it reports them to the profiler, and registers a thread-local
// RecordFunction callback for operator and user-range boundaries.  It records raw events into
// one buffer and nothing else: no Kineto session to start and stop, no event tree to build.
// Its config says the profiler is disabled (torch.autograd._profiler_enabled() stays False):
// the program runs as users run it.
//
// Plain C functions (loaded with ctypes, no Python headers): conformance_observer_start,
// _stop, _count, _events, _name.
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <pthread.h>
#include <time.h>

#include <cstdint>
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

// kind: 0 memory (size signed), 1 range start (name = index), 2 range end
struct Event {
  int64_t kind;
  int64_t time_ns;  // CLOCK_REALTIME, the clock IREE's probe and the profiler use
  int64_t ptr;      // memory: the pointer; range: its RecordFunction handle
  int64_t size;     // memory: bytes (negative: a free)
  int64_t name;     // range start: index into names
  int64_t thread;
};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

int64_t thread_id() {
  return static_cast<int64_t>(pthread_self());
}

std::mutex g_mutex;
std::vector<Event> g_events;
std::vector<std::string> g_names;
std::unordered_map<std::string, int64_t> g_name_index;

int64_t intern(const char* name) {
  std::string key(name ? name : "");
  auto it = g_name_index.find(key);
  if (it != g_name_index.end()) {
    return it->second;
  }
  int64_t index = static_cast<int64_t>(g_names.size());
  g_names.push_back(key);
  g_name_index.emplace(std::move(key), index);
  return index;
}

struct Observer final : public ProfilerStateBase {
  Observer() : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled, false, /*profile_memory=*/true)) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t /*total_allocated*/, size_t /*total_reserved*/,
                         c10::Device device) override {
    if (device.type() != c10::DeviceType::CPU) {
      return;
    }
    std::lock_guard<std::mutex> guard(g_mutex);
    g_events.push_back({0, now_ns(), reinterpret_cast<int64_t>(ptr), alloc_size, -1, thread_id()});
  }

  bool memoryProfilingEnabled() const override {
    return true;
  }

  ActiveProfilerType profilerType() override {
    return ActiveProfilerType::NONE;
  }
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_events.push_back({1, now_ns(), static_cast<int64_t>(fn.handle()), 0, intern(fn.name()), thread_id()});
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*ctx*/) {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_events.push_back({2, now_ns(), static_cast<int64_t>(fn.handle()), 0, -1, thread_id()});
}

}  // namespace

extern "C" {

// 0: started; 1: a profiler (or another observer) is already active on this thread.
int conformance_observer_start() {
  if (ProfilerStateBase::get(/*global=*/false) != nullptr || ProfilerStateBase::get(/*global=*/true) != nullptr) {
    return 1;
  }
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    g_events.clear();
    g_events.reserve(4096);
  }
  auto state = std::make_shared<Observer>();
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_start, &on_end).needsInputs(false).needsOutputs(false).needsIds(true));
  state->setCallbackHandle(handle);
  ProfilerStateBase::push(std::move(state));
  return 0;
}

// Pops the observer; its destructor removes the callback.
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

// Copies the events (6 int64 each) into out, which holds count() of them.
void conformance_observer_events(int64_t* out) {
  std::lock_guard<std::mutex> guard(g_mutex);
  for (const Event& e : g_events) {
    *out++ = e.kind;
    *out++ = e.time_ns;
    *out++ = e.ptr;
    *out++ = e.size;
    *out++ = e.name;
    *out++ = e.thread;
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
