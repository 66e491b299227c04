// epoll-floor-server: the least a heartbeat server can do on this machine, device_bench's floor
// beside the agent. One thread, one epoll: it completes the WebSocket upgrade zk-device sends,
// writes the 101 and the welcome frame (docs/device-protocol.md) in one write, and answers each
// ping text frame with one pong write. No JSON parser, no leases, no timers: its welcome says
// heartbeat_ms 0 and timeout_ms 0, as it times no device out.
//
// usage: epoll-floor-server [--listen-port P]   prints "LISTENING 127.0.0.1:<port>"; on SIGUSR2
// prints
//        "PINGS <pings answered so far>"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Connection {
  bool upgraded = false;
  std::string pending;  // bytes of an unfinished request or frame; empty between frames
};

// Sec-WebSocket-Accept (RFC 6455 section 4.2.2): base64(SHA-1(key + GUID)).
std::string acceptFor(std::string_view key) {
  const std::string input = std::string(key) + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(input.data(), input.size(), digest, &length, EVP_sha1(), nullptr);
  unsigned char encoded[64];
  const int size = EVP_EncodeBlock(encoded, digest, static_cast<int>(length));
  return {reinterpret_cast<char*>(encoded), static_cast<size_t>(size)};
}

std::string_view queryValue(std::string_view target, std::string_view name) {
  const auto query = target.find('?');
  if (query == std::string_view::npos) return {};
  for (size_t at = query + 1; at < target.size();) {
    const auto end = std::min(target.find('&', at), target.size());
    const auto pair = target.substr(at, end - at);
    if (pair.starts_with(name) && pair.size() > name.size() && pair[name.size()] == '=')
      return pair.substr(name.size() + 1);
    at = end + 1;
  }
  return {};
}

std::string_view headerValue(std::string_view request, std::string_view name) {
  for (size_t at = request.find("\r\n"); at != std::string_view::npos;) {
    const auto end = request.find("\r\n", at + 2);
    if (end == std::string_view::npos) break;
    const auto line = request.substr(at + 2, end - at - 2);
    if (line.size() > name.size() && line[name.size()] == ':' &&
        strncasecmp(line.data(), name.data(), name.size()) == 0) {
      auto value = line.substr(name.size() + 1);
      while (value.starts_with(' ')) value.remove_prefix(1);
      return value;
    }
    at = end;
  }
  return {};
}

// A server-to-client text frame (unmasked).
void appendTextFrame(std::string& out, std::string_view payload) {
  out.push_back(static_cast<char>(0x81));
  if (payload.size() < 126) {
    out.push_back(static_cast<char>(payload.size()));
  } else {
    out.push_back(126);
    out.push_back(static_cast<char>(payload.size() >> 8));
    out.push_back(static_cast<char>(payload.size() & 0xff));
  }
  out.append(payload);
}

// The 101 and the welcome frame, or false when the request is not an upgrade it can answer.
bool answerUpgrade(int fd, std::string_view request) {
  auto target = request.substr(0, request.find("\r\n"));  // GET <target> HTTP/1.1
  target = target.substr(0, target.rfind(' '));
  const auto key = headerValue(request, "Sec-WebSocket-Key");
  if (key.empty()) return false;
  std::string out =
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
      acceptFor(key) + "\r\n\r\n";
  appendTextFrame(out,
                  "{\"account\":\"" + std::string(queryValue(target, "account")) +
                      "\",\"agent\":\"epoll-floor\",\"counter\":1,\"device\":\"" +
                      std::string(queryValue(target, "device")) +
                      "\",\"heartbeat_ms\":0,\"timeout_ms\":0,\"token\":1,\"type\":\"welcome\"}");
  return ::write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size());
}

// Consumes the whole frames at the front of `in`; answers pings. False: close the connection.
bool answerFrames(int fd, std::string& in, uint64_t& pings) {
  size_t at = 0;
  std::string out;
  while (in.size() - at >= 6) {
    const auto* frame = reinterpret_cast<const unsigned char*>(in.data() + at);
    const int opcode = frame[0] & 0x0f;
    size_t length = frame[1] & 0x7f, header = 2;
    if (length == 126) {
      if (in.size() - at < 8) break;
      length = (size_t{frame[2]} << 8) | frame[3];
      header = 4;
    } else if (length == 127) {
      return false;  // a device never sends 64 KiB
    }
    if (in.size() - at < header + 4 + length) break;
    const unsigned char* mask = frame + header;
    std::string payload(in.data() + at + header + 4, length);
    for (size_t i = 0; i < length; ++i) payload[i] = static_cast<char>(payload[i] ^ mask[i % 4]);
    at += header + 4 + length;
    if (opcode == 0x8) return false;
    if (opcode != 0x1) continue;
    const auto key = payload.find("\"seq\":");
    if (key == std::string::npos) continue;
    const auto seq = payload.find_first_not_of(' ', key + 6);
    if (seq == std::string::npos) continue;
    const auto digits = payload.find_first_not_of("0123456789", seq);
    appendTextFrame(out, "{\"type\":\"pong\",\"seq\":" + payload.substr(seq, digits - seq) + "}");
    ++pings;
  }
  in.erase(0, at);
  return out.empty() || ::write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size());
}

}  // namespace

int main(int argc, char** argv) {
  uint16_t port = 0;
  if (argc == 3 && std::string_view(argv[1]) == "--listen-port") {
    port = static_cast<uint16_t>(std::stoul(argv[2]));
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: epoll-floor-server [--listen-port P]\n");
    return 2;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int yes = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      ::listen(listener, 4096) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    std::perror("epoll-floor-server: listen");
    return 1;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGUSR2);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  const int signalFd = ::signalfd(-1, &signals, SFD_NONBLOCK);
  const int epoll = ::epoll_create1(0);
  epoll_event event{EPOLLIN, {}};
  event.data.fd = listener;
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);
  event.data.fd = signalFd;
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, signalFd, &event);
  std::printf("LISTENING 127.0.0.1:%u\n", ntohs(address.sin_port));
  std::fflush(stdout);

  std::vector<Connection> connections;  // by fd
  uint64_t pings = 0;
  std::vector<epoll_event> ready(1024);
  char buffer[16384];
  for (;;) {
    const int n = ::epoll_wait(epoll, ready.data(), static_cast<int>(ready.size()), -1);
    for (int i = 0; i < n; ++i) {
      const int fd = ready[i].data.fd;
      if (fd == signalFd) {
        signalfd_siginfo info;
        while (::read(signalFd, &info, sizeof info) == sizeof info) {
        }
        std::printf("PINGS %llu\n", static_cast<unsigned long long>(pings));
        std::fflush(stdout);
      } else if (fd == listener) {
        for (int client; (client = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
          ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
          if (connections.size() <= static_cast<size_t>(client)) connections.resize(client + 1);
          connections[client] = {};
          epoll_event added{EPOLLIN, {}};
          added.data.fd = client;
          ::epoll_ctl(epoll, EPOLL_CTL_ADD, client, &added);
        }
      } else {
        Connection& connection = connections[fd];
        const ssize_t got = ::read(fd, buffer, sizeof buffer);
        bool open = got > 0;
        if (open) {
          connection.pending.append(buffer, static_cast<size_t>(got));
          if (!connection.upgraded) {
            const auto end = connection.pending.find("\r\n\r\n");
            if (end != std::string::npos) {
              open = answerUpgrade(fd, std::string_view(connection.pending).substr(0, end + 2));
              connection.pending.erase(0, end + 4);
              connection.upgraded = true;
            }
          }
          if (open && connection.upgraded) open = answerFrames(fd, connection.pending, pings);
          if (connection.pending.empty()) connection.pending.shrink_to_fit();
        }
        if (!open && !(got < 0 && errno == EAGAIN)) {
          ::close(fd);  // also leaves the epoll set
          connections[fd] = {};
        }
      }
    }
  }
}
