// The mapping from a Status to the antdt::Error subclass that reports it.
#include "core/error.hpp"

namespace antdt {

void throw_status(Status status, const std::string& message) {
  switch (status) {
    case Status::invalid_argument: throw InvalidArgument(message);
    case Status::config: throw ConfigError(message);
    case Status::bootstrap: throw BootstrapError(message);
    case Status::transport: throw TransportError(message);
    case Status::timeout: throw TimeoutError(message);
    case Status::mismatch: throw MismatchError(message);
    case Status::remote_abort: throw RemoteAbortError(message);
    case Status::aborted: throw AbortedError(message);
    case Status::unsupported: throw UnsupportedError(message);
    case Status::resync: throw ResyncError(message);
    case Status::peer_lost: throw PeerLostError(message);
    case Status::ok:
    case Status::internal: break;
  }
  throw InternalError(message);
}

}  // namespace antdt
