// The threads that start the run's child processes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace zkagent::chaos {

// Children get PR_SET_PDEATHSIG from the thread that forks them, so every process (agents, the
// gateway, ZooKeeper restarts) is started on one of these threads, which live for the whole run.
class Spawners {
 public:
  explicit Spawners(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Spawners() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Runs `task` on a spawner thread and waits for it; rethrows what it threw.
  void run(std::function<void()> task) {
    std::packaged_task<void()> packaged(std::move(task));
    auto done = packaged.get_future();
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(packaged));
    }
    wake_.notify_one();
    done.get();
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace zkagent::chaos
