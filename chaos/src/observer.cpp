#include "observer.hpp"

#include <zookeeper/zookeeper.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "zkagent/election.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::chaos {
namespace {

constexpr int kObserverSessionMs = 60000;  // outlives a server restart

}  // namespace

struct ActiveObserver::Impl {
  // Here, not in the anonymous namespace: Server keeps it in a field (GCC's -Wsubobject-linkage
  // once this file is part of a unity build).
  struct Work {
    enum class What { resync, expired, path } what;
    std::string path;
  };

  struct Server {
    Impl* owner = nullptr;
    int index = 0;
    std::string host;
    zhandle_t* zh = nullptr;
    std::mutex mu;
    std::condition_variable wake;
    std::deque<Work> queue;
    std::map<std::string, std::pair<bool, std::int64_t>> last;  // account -> (present, zxid)
    std::thread worker;
  };

  std::string root;
  std::vector<std::string> accounts;
  std::chrono::steady_clock::time_point t0;
  std::vector<std::unique_ptr<Server>> servers;
  mutable std::mutex samplesMu;
  std::vector<ActiveSample> all;
  std::map<std::string, ActiveSample> newest;
  std::mutex stopMu;
  bool stopping = false;

  static void onWatch(zhandle_t*, int type, int state, const char* path, void* context) {
    auto* server = static_cast<Server*>(context);
    Work work{Work::What::path, {}};
    if (type == ZOO_SESSION_EVENT) {
      if (state == ZOO_CONNECTED_STATE) {
        work.what = Work::What::resync;
      } else if (state == ZOO_EXPIRED_SESSION_STATE) {
        work.what = Work::What::expired;
      } else {
        return;
      }
    } else {
      work.path = path != nullptr ? path : "";
    }
    {
      std::lock_guard lock(server->mu);
      server->queue.push_back(std::move(work));
    }
    server->wake.notify_one();
  }

  bool stopped() {
    std::lock_guard lock(stopMu);
    return stopping;
  }

  std::int64_t nowMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t0)
        .count();
  }

  void record(Server& server, ActiveSample sample) {
    auto& seen = server.last[sample.account];
    if (seen == std::make_pair(sample.present, sample.zxid) && seen.second != 0) return;
    if (!sample.present && !seen.first && seen.second != 0) return;  // still absent
    seen = {sample.present, sample.zxid};
    std::lock_guard lock(samplesMu);
    auto [it, inserted] = newest.try_emplace(sample.account, sample);
    if (!inserted && sample.zxid >= it->second.zxid) it->second = sample;
    all.push_back(std::move(sample));
  }

  // Reads the account's active node and arms a watch on it (on its creation when absent).
  void read(Server& server, const std::string& account) {
    const std::string path = naming::activePath(root, account);
    for (int attempt = 0; attempt < 3; ++attempt) {
      char buffer[2048];
      int size = sizeof buffer;
      Stat stat{};
      const std::int64_t asked = nowMs();
      int rc = zoo_wget(server.zh, path.c_str(), onWatch, &server, buffer, &size, &stat);
      if (rc == ZOK) {
        ActiveSample s{asked, server.index, account, true, -1, {}, 0, stat.czxid};
        if (auto info = election::parseActive(std::string_view(buffer, size > 0 ? size : 0))) {
          s.seq = info->seq;
          s.instance = info->instanceId;
          s.sessionId = info->sessionId;
        }
        record(server, std::move(s));
        return;
      }
      if (rc != ZNONODE) return;  // connection trouble: the next Connected event re-reads
      rc = zoo_wexists(server.zh, path.c_str(), onWatch, &server, &stat);
      if (rc == ZOK) continue;  // created in between: read it
      if (rc != ZNONODE) return;
      Stat parent{};
      const std::string accountPath = naming::accountPath(root, account);
      if (zoo_exists(server.zh, accountPath.c_str(), 0, &parent) != ZOK) parent.pzxid = 0;
      record(server, ActiveSample{asked, server.index, account, false, -1, {}, 0, parent.pzxid});
      return;
    }
  }

  void connect(Server& server) {
    server.zh =
        zookeeper_init(server.host.c_str(), onWatch, kObserverSessionMs, nullptr, &server, 0);
  }

  void run(Server& server) {
    connect(server);
    while (!stopped()) {
      Work work;
      {
        std::unique_lock lock(server.mu);
        if (!server.wake.wait_for(lock, std::chrono::milliseconds(200),
                                  [&] { return !server.queue.empty(); })) {
          continue;
        }
        work = std::move(server.queue.front());
        server.queue.pop_front();
      }
      switch (work.what) {
        case Work::What::resync:
          for (const auto& account : accounts) read(server, account);
          break;
        case Work::What::expired:
          zookeeper_close(server.zh);
          connect(server);
          break;
        case Work::What::path: {
          if (auto account = naming::accountOfActivePath(root, work.path)) read(server, *account);
          break;
        }
      }
    }
    zookeeper_close(server.zh);
  }
};

ActiveObserver::ActiveObserver(std::vector<std::string> serverHosts, std::string root,
                               std::vector<std::string> accounts,
                               std::chrono::steady_clock::time_point t0)
    : impl_(std::make_unique<Impl>()) {
  impl_->root = std::move(root);
  impl_->accounts = std::move(accounts);
  impl_->t0 = t0;
  for (std::size_t i = 0; i < serverHosts.size(); ++i) {
    auto server = std::make_unique<Impl::Server>();
    server->owner = impl_.get();
    server->index = static_cast<int>(i);
    server->host = serverHosts[i];
    impl_->servers.push_back(std::move(server));
  }
  for (auto& server : impl_->servers) {
    server->worker = std::thread([impl = impl_.get(), s = server.get()] { impl->run(*s); });
  }
}

ActiveObserver::~ActiveObserver() {
  {
    std::lock_guard lock(impl_->stopMu);
    impl_->stopping = true;
  }
  for (auto& server : impl_->servers) server->worker.join();
}

std::vector<ActiveSample> ActiveObserver::samples() const {
  std::lock_guard lock(impl_->samplesMu);
  return impl_->all;
}

std::optional<ActiveSample> ActiveObserver::latest(const std::string& account) const {
  std::lock_guard lock(impl_->samplesMu);
  const auto it = impl_->newest.find(account);
  if (it == impl_->newest.end()) return std::nullopt;
  return it->second;
}

}  // namespace zkagent::chaos
