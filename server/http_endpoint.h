// A small plain-HTTP server for read-only GET routes (the coordinator's
// /metrics and its status page), on a thread pool of its own. This file is
// the only one that knows cpp-httplib.
//
// Every response says Cache-Control: no-store and X-Content-Type-Options:
// nosniff; a route may add headers (the status page's Content-Security-
// Policy). Anything but a known GET path is 404 (405 for other methods,
// as cpp-httplib answers).
#ifndef TESSERA_SERVER_HTTP_ENDPOINT_H_
#define TESSERA_SERVER_HTTP_ENDPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers;
};

struct HttpRoute {
  // An ECMAScript regular expression the whole path must match, e.g.
  // "/api/jobs/([^/]+)/steps"; its capture groups are passed to `handler`.
  std::string pattern;
  std::function<HttpResponse(const std::vector<std::string>& captures)> handler;
};

class HttpEndpoint {
 public:
  // Serves `routes` on `listen` (host:port; port 0 picks one).
  // INVALID_ARGUMENT naming `flag` if it cannot listen there.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& flag,
                                                             const std::string& listen,
                                                             std::vector<HttpRoute> routes);
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
