// The CUDA-free half of cuda/ipc.hpp: process identity and the handle's wire
// format. Compiled in every build.
#include "cuda/ipc.hpp"

#include "core/error.hpp"

#include <chrono>
#include <random>

#include <unistd.h>

namespace antdt::cuda {
namespace {

std::uint64_t random_token() noexcept {
  try {
    std::random_device device;
    const std::uint64_t high = device();
    return (high << 32) ^ device();
  } catch (...) {
    // No entropy source: the clock still separates processes started apart.
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           (static_cast<std::uint64_t>(::getpid()) << 40);
  }
}

// Little-endian fields, whatever the host order.
class Writer {
 public:
  explicit Writer(IpcHandle::Wire& out) : out_(out) {}
  template <class T>
  void put(T value) noexcept {
    auto bits = static_cast<std::uint64_t>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i, bits >>= 8) out_[at_++] = static_cast<std::byte>(bits & 0xff);
  }
  void put_bytes(std::span<const std::byte> bytes) noexcept {
    for (std::byte b : bytes) out_[at_++] = b;
  }

 private:
  IpcHandle::Wire& out_;
  std::size_t at_ = 0;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <class T>
  T get() noexcept {
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<std::uint64_t>(in_[at_++]) << (8 * i);
    return static_cast<T>(bits);
  }
  void get_bytes(std::span<std::byte> out) noexcept {
    for (std::byte& b : out) b = in_[at_++];
  }

 private:
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

}  // namespace

ProcessIdentity this_process() noexcept {
  static const std::uint64_t token = random_token();
  return ProcessIdentity{token, static_cast<std::int32_t>(::getpid())};
}

bool IpcHandle::from_this_process() const noexcept {
  const ProcessIdentity me = this_process();
  return exporter.token == me.token && exporter.pid == me.pid;
}

IpcHandle::Wire IpcHandle::serialize() const noexcept {
  Wire wire{};
  Writer w(wire);
  w.put(kMagic);
  w.put(kVersion);
  w.put(std::uint16_t{0});
  w.put_bytes(cuda_handle);
  w.put(offset);
  w.put(bytes);
  w.put(exporter_address);
  w.put(exporter.token);
  w.put(static_cast<std::uint32_t>(exporter.pid));
  w.put(static_cast<std::uint32_t>(device));
  return wire;
}

IpcHandle IpcHandle::deserialize(std::span<const std::byte> wire) {
  ANTDT_CHECK_ARG(wire.size() == kWireBytes, "CUDA IPC handle: ", wire.size(), " bytes received, expected ",
                  kWireBytes);
  Reader r(wire);
  const auto magic = r.get<std::uint32_t>();
  ANTDT_CHECK_ARG(magic == kMagic, "CUDA IPC handle: bad magic 0x", std::hex, magic, " (not a handle)");
  const auto version = r.get<std::uint16_t>();
  ANTDT_CHECK_ARG(version == kVersion, "CUDA IPC handle: version ", version, " is not the supported version ",
                  kVersion);
  static_cast<void>(r.get<std::uint16_t>());
  IpcHandle h;
  r.get_bytes(h.cuda_handle);
  h.offset = r.get<std::uint64_t>();
  h.bytes = r.get<std::uint64_t>();
  h.exporter_address = r.get<std::uint64_t>();
  h.exporter.token = r.get<std::uint64_t>();
  h.exporter.pid = static_cast<std::int32_t>(r.get<std::uint32_t>());
  h.device = static_cast<std::int32_t>(r.get<std::uint32_t>());
  return h;
}

}  // namespace antdt::cuda
