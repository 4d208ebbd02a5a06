#include "core/wire_codec.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace antdt::wire {

Hmac hmac_sha256(std::span<const std::byte> secret, std::span<const std::byte> message) {
  Hmac mac{};
  unsigned int mac_len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(),
            reinterpret_cast<unsigned char*>(mac.data()), &mac_len) ||
      mac_len != kHmacBytes)
    raise<InternalError>("HMAC-SHA256 failed");
  return mac;
}

bool same_mac(const Hmac& a, const Hmac& b) noexcept { return CRYPTO_memcmp(a.data(), b.data(), kHmacBytes) == 0; }

}  // namespace antdt::wire
