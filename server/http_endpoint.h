// A tiny plain-HTTP server for one read-only GET path (the coordinator's
// /metrics), on a thread pool of its own. This file is the only one that
// knows cpp-httplib.
#ifndef TESSERA_SERVER_HTTP_ENDPOINT_H_
#define TESSERA_SERVER_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace tessera {

class HttpEndpoint {
 public:
  // Serves GET `path` on `listen` (host:port; port 0 picks one) with the
  // body `body()` returns. INVALID_ARGUMENT naming `flag` if it cannot
  // listen there.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& flag,
                                                             const std::string& listen,
                                                             const std::string& path,
                                                             const std::string& content_type,
                                                             std::function<std::string()> body);
  ~HttpEndpoint();  // stops serving and joins

  // host:port actually bound.
  const std::string& address() const { return address_; }

 private:
  struct Server;
  HttpEndpoint() = default;
  std::string address_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_HTTP_ENDPOINT_H_
